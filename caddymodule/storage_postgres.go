package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/stores"
)

func init() {
	caddy.RegisterModule(PostgresStorage{})
}

// PostgresStorage keeps the data in a PostgreSQL database that several
// gateway instances may share (webapi.storage.postgres, docs/operators.md).
//
//	storage postgres {
//		dsn {env.KEYGATE_DATABASE_URL}
//		dsn_file /run/secrets/keygate-dsn
//		max_conns 20
//		schema keygate
//	}
type PostgresStorage struct {
	// DSN is a libpq URL or key/value string; Caddy placeholders such as
	// {env.KEYGATE_DATABASE_URL} are replaced at provision, so the config
	// (and autosave.json) holds the placeholder, not the DSN; the
	// Caddyfile's {$VAR} is replaced when the Caddyfile is read and lands
	// in the config as written. It never appears in a log or an error
	// (pgdb.Redact). Without dsn and dsn_file, the environment variable
	// KEYGATE_DATABASE_URL holds it.
	DSN string `json:"dsn,omitempty"`
	// DSNFile holds the DSN instead (a secret file); one of the two.
	DSNFile string `json:"dsn_file,omitempty"`
	// MaxConns bounds the connection pool of this instance. Default 20.
	MaxConns int `json:"max_conns,omitempty"`
	// Schema holds keygate's tables. Default keygate.
	Schema string `json:"schema,omitempty"`

	dsn string // resolved at provision
}

// DefaultDSNEnv holds the DSN when the config gives neither dsn nor
// dsn_file, so that the default Caddyfile runs on PostgreSQL with two
// environment variables (docs/operators.md).
const DefaultDSNEnv = "KEYGATE_DATABASE_URL"

// CaddyModule returns the Caddy module information.
func (PostgresStorage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "webapi.storage.postgres",
		New: func() caddy.Module { return new(PostgresStorage) },
	}
}

// Provision resolves the DSN from its placeholder or file.
func (s *PostgresStorage) Provision(caddy.Context) error {
	switch {
	case s.DSN != "" && s.DSNFile != "":
		return errors.New("storage postgres: give dsn or dsn_file, not both")
	case s.DSNFile != "":
		b, err := os.ReadFile(s.DSNFile)
		if err != nil {
			return fmt.Errorf("storage postgres: reading dsn_file: %w", err)
		}
		s.dsn = strings.TrimSpace(string(b))
	case s.DSN != "":
		s.dsn = strings.TrimSpace(caddy.NewReplacer().ReplaceKnown(s.DSN, ""))
	default:
		s.dsn = strings.TrimSpace(os.Getenv(DefaultDSNEnv))
	}
	if s.dsn == "" {
		return errors.New("storage postgres: the dsn is empty (set dsn, dsn_file or the environment variable " + DefaultDSNEnv + ")")
	}
	if s.Schema == "" {
		s.Schema = pgdb.DefaultSchema
	}
	return nil
}

// Validate checks the options.
func (s *PostgresStorage) Validate() error {
	if s.MaxConns != 0 && s.MaxConns < 2 {
		return errors.New("storage postgres: max_conns must be at least 2")
	}
	if _, err := pgdb.CheckDSN(s.dsn); err != nil {
		return fmt.Errorf("storage postgres: %w", err)
	}
	return nil
}

// PoolKey implements Storage: the server, database and schema as the DSN
// names them (pgdb.Redact: no user, no password, no other parameter), so
// configs naming the same database alike share one pool.
func (s *PostgresStorage) PoolKey(string) (string, error) {
	if _, err := pgdb.CheckDSN(s.dsn); err != nil {
		return "", fmt.Errorf("storage postgres: %w", err)
	}
	return pgdb.Redact(s.dsn) + " schema " + s.Schema, nil
}

// OpenStores implements Storage: it connects, applies the migrations the
// schema lacks, checks the master key against the one the database was
// first started with, and opens every store on it. A database that does
// not answer stops the start with a message naming the server but not
// the password.
func (s *PostgresStorage) OpenStores(env StorageEnv) (*stores.Stores, error) {
	where, err := s.PoolKey(env.DataDir)
	if err != nil {
		return nil, err
	}
	db, err := pgdb.Open(context.Background(), s.config())
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", where, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgdb.DefaultTimeout)
	defer cancel()
	if err := db.CheckMasterKey(ctx, env.MasterKey); err != nil {
		db.Close()
		return nil, err
	}
	return stores.OpenPostgres(db, where), nil
}

// config is the pgdb configuration of this module.
func (s *PostgresStorage) config() pgdb.Config {
	return pgdb.Config{DSN: s.dsn, Schema: s.Schema, MaxConns: int32(s.MaxConns), OnUnavailable: metrics.dbErrors.Inc}
}

// UnmarshalCaddyfile reads the `storage postgres { ... }` block.
func (s *PostgresStorage) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch d.Val() {
		case "dsn":
			err = oneArg(d, &s.DSN)
		case "dsn_file":
			err = oneArg(d, &s.DSNFile)
		case "schema":
			err = oneArg(d, &s.Schema)
		case "max_conns":
			var v string
			if err = oneArg(d, &v); err == nil {
				if s.MaxConns, err = strconv.Atoi(v); err != nil {
					return d.Errf("max_conns: %v", err)
				}
			}
		default:
			return d.Errf("unknown storage postgres option %q", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Interface guards
var (
	_ Storage               = (*PostgresStorage)(nil)
	_ caddy.Provisioner     = (*PostgresStorage)(nil)
	_ caddy.Validator       = (*PostgresStorage)(nil)
	_ caddyfile.Unmarshaler = (*PostgresStorage)(nil)
)
