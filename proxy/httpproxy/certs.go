package httpproxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
)

// CertSource chooses the certificate a TLS listener presents for a
// handshake. Every certificate choice goes through one: the listener's
// PEM files are one (CertFiles), and Server.SetCertSources adds others
// (ACME) before them. GetCertificate returns nil and no error when it has
// no certificate for the hello, so that the next source is asked; an
// error fails the handshake. It is called on every handshake,
// concurrently: it must be quick and allocate little.
type CertSource interface {
	GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error)
}

// certSet is an immutable index of certificates by the DNS names of their
// leaf (its SANs): exact names, and the parent domains of one-label
// wildcards (*.example.com is under "example.com").
type certSet struct {
	certs []*tls.Certificate // as configured; the first is the default
	exact map[string]*tls.Certificate
	wild  map[string]*tls.Certificate
}

// newCertSet indexes certs; a name two certificates have goes to the one
// listed first.
func newCertSet(certs []*tls.Certificate) *certSet {
	s := &certSet{certs: certs, exact: map[string]*tls.Certificate{}, wild: map[string]*tls.Certificate{}}
	for _, c := range certs {
		if c.Leaf == nil {
			continue
		}
		for _, name := range c.Leaf.DNSNames {
			name = strings.TrimSuffix(strings.ToLower(name), ".")
			m := s.exact
			if rest, ok := strings.CutPrefix(name, "*."); ok {
				m, name = s.wild, rest
			}
			if _, taken := m[name]; !taken {
				m[name] = c
			}
		}
	}
	return s
}

// lookup returns the certificate for server name sni: one with the exact
// name, else one whose wildcard covers it (one label: *.example.com
// covers a.example.com, not a.b.example.com nor example.com), else nil.
// It allocates only for a name with upper-case letters.
func (s *certSet) lookup(sni string) *tls.Certificate {
	if sni == "" {
		return nil
	}
	sni = strings.TrimSuffix(sni, ".")
	for i := 0; i < len(sni); i++ {
		if c := sni[i]; 'A' <= c && c <= 'Z' {
			sni = strings.ToLower(sni)
			break
		}
	}
	if c := s.exact[sni]; c != nil {
		return c
	}
	if i := strings.IndexByte(sni, '.'); i > 0 {
		return s.wild[sni[i+1:]]
	}
	return nil
}

// CertFiles is the CertSource of a listener's PEM files: the certificate
// whose DNS names match the client's server name (SNI), the exact name
// before a wildcard; with no match it has none (Default is the listener's
// fallback). It watches the files' directories, not the files, since
// editors and cert-manager replace a file by renaming a new one over it
// and Kubernetes swaps a "..data" symlink: a pair that changes is loaded
// and used for the next handshakes, and a pair that no longer loads
// (half-written, mismatched, unreadable) keeps the certificate it had,
// with an error in the log naming its files and in
// switchboard_tls_certificate_reloads_total{result="error"}.
type CertFiles struct {
	listener string
	files    []config.Certificate
	log      *slog.Logger
	m        *CertMetrics
	set      atomic.Pointer[certSet]

	mu      sync.Mutex // serialises Reload
	loaded  []pairBytes
	stop    chan struct{}
	done    chan struct{}
	closing sync.Once
}

// pairBytes is what a certificate's files held when last read: the good
// pair in use, and the last bad one (not reported twice).
type pairBytes struct {
	cert, key       []byte
	badCert, badKey []byte
}

// certSettle is how long the files must be quiet after a change before
// they are read: a certificate and its key are seldom written at once.
const certSettle = 100 * time.Millisecond

// certPoll is how often the files are read when their directories cannot
// be watched.
const certPoll = 30 * time.Second

// LoadCertFiles loads the listener's certificates, in order (the first is
// the default), and starts watching them until Close. Its error names the
// files that do not load.
func LoadCertFiles(listener string, files []config.Certificate, log *slog.Logger, m *CertMetrics) (*CertFiles, error) {
	c := &CertFiles{listener: listener, files: files, log: log, m: m, loaded: make([]pairBytes, len(files)),
		stop: make(chan struct{}), done: make(chan struct{})}
	// Watch first, then read: a change between the two is not missed.
	w, werr := fsnotify.NewWatcher()
	if werr == nil {
		for _, dir := range c.dirs() {
			if werr = w.Add(dir); werr != nil {
				w.Close()
				break
			}
		}
	}
	certs := make([]*tls.Certificate, len(files))
	for i, f := range files {
		cert, key, err := readPair(f)
		var kp tls.Certificate
		if err == nil {
			kp, err = tls.X509KeyPair(cert, key)
		}
		if err != nil {
			if werr == nil {
				w.Close()
			}
			return nil, fmt.Errorf("listener %q: certificate %s with key %s: %w", listener, f.CertFile, f.KeyFile, err)
		}
		certs[i] = &kp
		c.loaded[i] = pairBytes{cert: cert, key: key}
	}
	c.set.Store(newCertSet(certs))
	if werr != nil {
		log.Error("cannot watch the listener's certificate files; reading them every "+certPoll.String()+" instead", "listener", listener, "error", werr)
		go c.poll()
	} else {
		go c.watch(w)
	}
	return c, nil
}

func readPair(f config.Certificate) (cert, key []byte, err error) {
	if cert, err = os.ReadFile(f.CertFile); err != nil {
		return nil, nil, err
	}
	if key, err = os.ReadFile(f.KeyFile); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// dirs are the directories of the files, each once.
func (c *CertFiles) dirs() []string {
	var dirs []string
	for _, f := range c.files {
		for _, p := range []string{f.CertFile, f.KeyFile} {
			if d := filepath.Dir(p); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// GetCertificate returns the certificate for the hello's server name, or
// nil when none of the files' certificates has it.
func (c *CertFiles) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.set.Load().lookup(hello.ServerName), nil
}

// Default is the first certificate: the one for clients that send no
// server name, or one no certificate has.
func (c *CertFiles) Default() *tls.Certificate { return c.set.Load().certs[0] }

// sameFiles reports whether c serves exactly files, in order.
func (c *CertFiles) sameFiles(files []config.Certificate) bool { return slices.Equal(c.files, files) }

// watch reloads the files a moment after changes in their directories
// settle, until Close.
func (c *CertFiles) watch(w *fsnotify.Watcher) {
	defer close(c.done)
	defer w.Close()
	names := map[string]bool{}
	for _, f := range c.files {
		names[filepath.Base(f.CertFile)] = true
		names[filepath.Base(f.KeyFile)] = true
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-c.stop:
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			// One of our files, or a Kubernetes-style "..data" symlink
			// swap that changes what our files point to.
			if base := filepath.Base(ev.Name); names[base] || strings.HasPrefix(base, "..") {
				timer.Reset(certSettle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			c.log.Warn("certificate watch error; reading the files", "listener", c.listener, "error", err)
			timer.Reset(certSettle)
		case <-timer.C:
			c.Reload()
		}
	}
}

// poll reloads the files every certPoll, until Close.
func (c *CertFiles) poll() {
	defer close(c.done)
	t := time.NewTicker(certPoll)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.Reload()
		}
	}
}

// Reload reads the files again and takes every pair that changed and
// loads; a pair that changed and does not load keeps its certificate,
// and is logged and counted once per content. The watch calls it; a
// configuration reload that keeps the files does too.
func (c *CertFiles) Reload() {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.set.Load()
	var certs []*tls.Certificate
	for i, f := range c.files {
		p := &c.loaded[i]
		cert, key, err := readPair(f)
		if err == nil && bytes.Equal(cert, p.cert) && bytes.Equal(key, p.key) {
			continue // unchanged
		}
		if err == nil && bytes.Equal(cert, p.badCert) && bytes.Equal(key, p.badKey) {
			continue // the same bad content, already reported
		}
		var kp tls.Certificate
		if err == nil {
			kp, err = tls.X509KeyPair(cert, key)
		}
		if err != nil {
			p.badCert, p.badKey = cert, key
			c.log.Error("certificate not reloaded; keeping the one in use", "listener", c.listener, "cert_file", f.CertFile, "key_file", f.KeyFile, "error", err)
			c.m.reloaded(c.listener, false)
			continue
		}
		if certs == nil {
			certs = slices.Clone(old.certs)
		}
		certs[i] = &kp
		*p = pairBytes{cert: cert, key: key}
		if kp.Leaf != nil {
			c.log.Info("certificate reloaded", "listener", c.listener, "cert_file", f.CertFile, "names", kp.Leaf.DNSNames, "not_after", kp.Leaf.NotAfter)
		}
		c.m.reloaded(c.listener, true)
	}
	if certs != nil {
		c.set.Store(newCertSet(certs))
	}
}

// Close stops the watching; the certificates stay usable.
func (c *CertFiles) Close() {
	c.closing.Do(func() {
		close(c.stop)
		<-c.done
	})
}

// CertMetrics count the reloads of listeners' certificate files.
type CertMetrics struct {
	reloads *prometheus.CounterVec
}

// NewCertMetrics creates the metrics and registers them with reg.
func NewCertMetrics(reg prometheus.Registerer) *CertMetrics {
	m := &CertMetrics{reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_tls_certificate_reloads_total",
		Help: "Certificate files of TLS listeners read again after they changed, by listener and result (ok: in use; error: not loadable, the previous certificate kept).",
	}, []string{"listener", "result"})}
	reg.MustRegister(m.reloads)
	return m
}

// Vecs returns the metric vectors, for a caller that deletes the series of
// listeners that are gone.
func (m *CertMetrics) Vecs() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{m.reloads.MetricVec}
}

func (m *CertMetrics) reloaded(listener string, ok bool) {
	if m == nil {
		return
	}
	result := "error"
	if ok {
		result = "ok"
	}
	m.reloads.WithLabelValues(listener, result).Inc()
}
