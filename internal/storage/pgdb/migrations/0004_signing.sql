-- The signing lifecycle's own records, keyed by signer id (unique across
-- contracts): each signer's current one-time password, hashed, and their
-- signature from their decision until the contract is final.
CREATE TABLE signing_otps (
	signer_id uuid PRIMARY KEY,
	hash      bytea NOT NULL,
	salt      bytea NOT NULL,
	sent      timestamptz NOT NULL,
	expires   timestamptz NOT NULL,
	failures  integer NOT NULL DEFAULT 0
);

CREATE TABLE signing_signatures (
	signer_id uuid PRIMARY KEY,
	method    text NOT NULL,
	data      bytea NOT NULL
);
