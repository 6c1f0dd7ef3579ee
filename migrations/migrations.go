// Package migrations holds txfence's schema as goose SQL migrations, embedded
// so that the binary that runs them carries them.
package migrations

import "embed"

// FS holds every NNNNN_name.sql migration.
//
//go:embed *.sql
var FS embed.FS
