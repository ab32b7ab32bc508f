// Package discovery keeps a cached, watched, outage-proof view of a
// service's instances over any registry.Discoverer.
//
// Watch returns a View of one registry.Query. Views of the same query share
// one watch loop: the first Next of a registry.Watcher fills the view, every
// later Next replaces it, and subscribers receive whole snapshots, one at a
// time and in order. The loop runs while at least one View of the query is
// open.
//
// What the view does when the registry misbehaves:
//
//   - An error keeps the last known instances in service, marks the view
//     stale, records the error and retries with exponential backoff and full
//     jitter (MinBackoff 100ms doubling up to MaxBackoff 30s by default).
//   - A service that had instances and is suddenly reported empty, while the
//     registry otherwise answers, keeps its previous instances for
//     EmptyGrace (30s by default) and is published empty only after that. A
//     registry restarting with no registrations yet then costs nothing.
//   - With CacheDir set, the last good view of every query is written to disk
//     (atomically) whenever it changes, and loaded when a view starts: a
//     switchboard that restarts while the registry is down routes on what it
//     last knew, marked stale and FromCache, until the registry answers.
//
// Most callers need Watch, Ready and Subscribe, feeding an endpoint.Pool
// through Specs:
//
//	v := d.Watch(registry.Query{Service: "orders", PassingOnly: true})
//	defer v.Close()
//	if err := v.Ready(ctx); err != nil { ... }
//	cancel := v.Subscribe(func(s discovery.Snapshot) { pool.Update(discovery.Specs(s.Instances)) })
package discovery
