// Package roote2e holds TestHelperAsRoot (build tag helpere2e): bcd helper
// as real root, run by `cargo xtask helper-e2e` inside private mount and
// network namespaces. Without the tag the package is empty, so that
// `go test ./...` and `go vet ./...` see a package here.
package roote2e
