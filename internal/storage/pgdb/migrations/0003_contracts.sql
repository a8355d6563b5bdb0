-- Templates and contracts (upstreams/contracts, PostgresBackend). Text that
-- is compared or ordered is COLLATE "C", so results and their order are
-- byte for byte those of the bbolt backend; records are kept as bytea, the
-- exact bytes the Go code encoded.
CREATE TABLE templates (
	id     text COLLATE "C" PRIMARY KEY,
	record bytea NOT NULL,
	digest bytea NOT NULL
);

-- The copy of a template's text made at creation, shared by the contracts
-- made from the same text (contracts.document_digest). No counter: a row
-- every create from one template updated would serialise those creates;
-- the foreign key keeps a document that a contract holds.
CREATE TABLE contract_documents (
	digest   bytea PRIMARY KEY,
	document bytea NOT NULL
);

-- One row a contract: the record and every column search filters and
-- orders on. created and expires are Unix milliseconds, as the API shows
-- them; status is the stored status (0 sent, 1 ongoing, 2 rejected,
-- 3 signed, 4 expired), archived the placement; search_text is the folded
-- text substring search looks in, computed in Go, values separated by
-- U+0001 (no query holds it).
CREATE TABLE contracts (
	id          uuid PRIMARY KEY,
	created     bigint NOT NULL,
	template_id text COLLATE "C" NOT NULL,
	creator_id  text COLLATE "C" NOT NULL,
	name        text COLLATE "C" NOT NULL,
	folded_name text COLLATE "C" NOT NULL,
	search_text text COLLATE "C" NOT NULL,
	status      smallint NOT NULL,
	archived    boolean NOT NULL,
	expires     bigint NOT NULL,
	document_digest bytea NOT NULL REFERENCES contract_documents (digest),
	record      bytea NOT NULL
);
CREATE INDEX contracts_document ON contracts (document_digest);
CREATE INDEX contracts_created ON contracts (created, id);
CREATE INDEX contracts_template_creator ON contracts (template_id, creator_id, created, id);
CREATE INDEX contracts_creator ON contracts (creator_id, created, id);
CREATE INDEX contracts_status ON contracts (status, created, id);
CREATE INDEX contracts_archived ON contracts (archived, created, id);
CREATE INDEX contracts_name ON contracts (folded_name, name, id);
-- Contracts stored as sent or ongoing, by expiry: the sweep and "expired".
CREATE INDEX contracts_expiry ON contracts (expires, created, id) WHERE status IN (0, 1);
CREATE INDEX contracts_search_text ON contracts USING gin (search_text gin_trgm_ops);

-- SHA-256 of a signing-link token → its contract and signer.
CREATE TABLE signing_tokens (
	token_hash  bytea PRIMARY KEY,
	contract_id uuid NOT NULL,
	signer_id   uuid NOT NULL
);
CREATE INDEX signing_tokens_contract ON signing_tokens (contract_id);

-- The PDFs made when a contract is completed.
CREATE TABLE contract_attachments (
	contract_id uuid NOT NULL,
	id          uuid NOT NULL,
	data        bytea NOT NULL,
	PRIMARY KEY (contract_id, id)
);
