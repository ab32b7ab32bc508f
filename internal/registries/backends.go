package registries

import (
	"log/slog"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/registry"
	etcdreg "github.com/switchboard-dev/switchboard/registry/etcd"
)

func openEtcd(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	tc, err := clientTLS(rc.TLS)
	if err != nil {
		return nil, nil, err
	}
	eps := rc.Addresses
	if rc.Address != "" {
		eps = append([]string{rc.Address}, eps...)
	}
	r, err := etcdreg.New(etcdreg.Config{Endpoints: eps, Prefix: rc.Prefix, Username: rc.Username, Password: rc.Password, TLS: tc, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return r, r.Close, nil
}

func openConsul(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	return nil, nil, errNotBuilt
}

func openDNS(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	return nil, nil, errNotBuilt
}

func openStatic(rc *config.RegistryBackend, log *slog.Logger) (registry.Discoverer, func() error, error) {
	return nil, nil, errNotBuilt
}
