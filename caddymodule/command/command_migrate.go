package command

// `caddy webapi migrate`.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/migrate"
)

// migrateCommand is `caddy webapi migrate` (docs/operators.md, "Moving from
// one box to several"): it reads its flags and files, has
// migrate.BoltToPostgres copy the data, and prints what was copied.
func migrateCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "migrate --to postgres --dsn-file F [--data-dir ./data] [--schema keygate] [--master-key-file F]",
		Short: "Copies a stopped gateway's bbolt data into an empty PostgreSQL schema",
		Long: `
Copies the data of a stopped gateway on bbolt (<data-dir>/webapi.db: keys
with their usage and sealed tokens, templates, contracts in every status with
their signers, attachments and signing state, one-time passwords and
signatures, pending notifications, shares with their activity and openings,
webhook subscriptions with their sealed secrets, pending deliveries and logs,
the replies kept for Idempotency-Key retries that are not 24 h old)
into an empty PostgreSQL schema, in one transaction, and prints what it
copied. The schema is created and migrated if needed; one that holds data is
refused. The bbolt file is opened read-only and left as it is.

Tokens, signing links and share passwords keep working when the gateways on
PostgreSQL run with the same master key (--master-key-file, by default
<data-dir>/master.key), whose check value the schema records.

The DSN is read from --dsn-file (a libpq URL or key/value string); it is
never printed, not even in an error.`,
		Args: cobra.NoArgs,
		RunE: runMigrate,
	}
	f := c.Flags()
	f.String("to", "", "the target backend: postgres (required)")
	f.String("dsn-file", "", "file holding the PostgreSQL DSN (required)")
	f.String("data-dir", "./data", "the stopped gateway's data_dir, holding webapi.db")
	f.String("schema", pgdb.DefaultSchema, "the PostgreSQL schema to copy into")
	f.String("master-key-file", "", "the gateway's master key (default <data-dir>/master.key)")
	return c
}

func runMigrate(c *cobra.Command, _ []string) error {
	f := c.Flags()
	to, _ := f.GetString("to")
	dsnFile, _ := f.GetString("dsn-file")
	dataDir, _ := f.GetString("data-dir")
	schema, _ := f.GetString("schema")
	keyFile, _ := f.GetString("master-key-file")
	var bad []string
	switch to {
	case "postgres":
	case "":
		bad = append(bad, "--to is required: --to postgres")
	default:
		bad = append(bad, fmt.Sprintf("--to %q: postgres is the only target", to))
	}
	if dsnFile == "" {
		bad = append(bad, "--dsn-file is required: a file holding the PostgreSQL DSN")
	}
	if dataDir == "" {
		bad = append(bad, "--data-dir must not be empty")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	if keyFile == "" {
		keyFile = filepath.Join(dataDir, "master.key")
	}
	raw, err := os.ReadFile(dsnFile)
	if err != nil {
		return fmt.Errorf("reading --dsn-file: %w", err)
	}
	dsn := strings.TrimSpace(string(raw))
	if dsn == "" {
		return fmt.Errorf("--dsn-file %s is empty: it must hold the PostgreSQL DSN", dsnFile)
	}
	if _, err := pgdb.CheckDSN(dsn); err != nil {
		return fmt.Errorf("--dsn-file %s: %w", dsnFile, err)
	}
	masterKey, err := seal.LoadMasterKey(keyFile)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no master key at %s: give the stopped gateway's master key file with --master-key-file (a new key would open none of its tokens)", keyFile)
	}
	if err != nil {
		return err
	}

	// Ctrl-C rolls the copy back.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	boltPath := filepath.Join(dataDir, "webapi.db")
	target := pgdb.Redact(dsn)
	fmt.Fprintf(c.ErrOrStderr(), "copying %s into %s, schema %s ...\n", boltPath, target, schema)
	rep, err := migrate.BoltToPostgres(ctx, migrate.Config{
		BoltPath:  boltPath,
		MasterKey: masterKey,
		Postgres:  pgdb.Config{DSN: dsn, Schema: schema},
	})
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted: nothing was copied")
		}
		if errors.Is(err, pgdb.ErrNotEmpty) {
			err = fmt.Errorf("%w; a copy goes into an empty schema only: give --schema another name, or drop this schema if what it holds is not needed", err)
		}
		return withoutSecret(err, dsn)
	}
	out := c.OutOrStdout()
	fmt.Fprintf(out, "Copied %s into %s, schema %s, in one transaction:\n", boltPath, target, rep.Schema)
	kindWidth, numWidth := 0, 0
	for _, line := range rep.Copied {
		kindWidth = max(kindWidth, len(line.Kind))
		numWidth = max(numWidth, len(fmt.Sprint(line.N)))
	}
	for _, line := range rep.Copied {
		note := ""
		if line.Note != "" {
			note = "  (" + line.Note + ")"
		}
		fmt.Fprintf(out, "  %-*s  %*d%s\n", kindWidth, line.Kind, numWidth, line.N, note)
	}
	fmt.Fprintf(out, "The schema holds the check value of the master key %s: run every gateway on it with that key.\n", keyFile)
	return nil
}

// withoutSecret is err with the DSN's secrets cut out (pgdb.Scrub). pgdb
// keeps them out of its errors already; this holds for any other error
// too.
func withoutSecret(err error, dsn string) error {
	msg := pgdb.Scrub(err.Error(), dsn)
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}
