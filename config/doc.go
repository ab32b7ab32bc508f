// Package config loads, validates and fills in defaults for a switchboard
// configuration file.
//
// Most callers use [Load] (or [Parse] for bytes already in hand). Either
// returns a fully defaulted *Config, or a nil *Config and an [Errors] value
// listing every problem in the file, each with its line and column:
//
//	lb.yaml:7:14: expected a duration like "250ms", got "fast"
//	lb.yaml:12:17: route upstream "ordrs" is not defined (defined: orders, users)
//
// Loading happens in four steps, all of which keep going after a problem so
// that one run reports everything:
//
//  1. The file is parsed into a yaml.Node tree, which keeps positions.
//  2. A small reflective decoder walks the tree into the structs of
//     types.go. It rejects unknown and duplicate keys and wrongly typed
//     values, expands ${NAME} in scalar values, and records in a side table
//     where every struct, field, list element and map entry came from.
//  3. Semantic checks (validate.go) look at the decoded values and report
//     problems at the recorded positions. A block that is a library config
//     (balance.Config, health.ActiveConfig, breaker.Config, retry.Policy,
//     ratelimit.Config, ...) is decoded into that type and judged by its
//     own Validate, once; each *field.Error it returns names a key path,
//     which is followed through the yaml tags to the line it came from.
//  4. When there were no problems, the defaults documented on the fields are
//     filled in (defaults.go); a library config's zero fields are left for
//     the library, whose defaults they mean.
//
// The field comments in types.go, and those of the library configs that
// types.go uses, are the reference for users; docs/configuration.md
// repeats them with examples.
package config
