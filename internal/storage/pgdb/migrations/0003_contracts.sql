-- Templates and contracts (upstreams/contracts, PostgresBackend). Text that
-- is compared or ordered is COLLATE "C", so results and their order are
-- byte for byte those of the bbolt backend; records are kept as bytea, the
-- exact bytes the Go code encoded.
-- version changes with every write of a template (from a sequence, so a
-- template deleted and added again does not reuse one): an instance that
-- remembers a template checks, in the create's transaction, that it is
-- still the one it remembers.
CREATE SEQUENCE template_version_seq;
CREATE TABLE templates (
	id      text COLLATE "C" PRIMARY KEY,
	record  bytea NOT NULL,
	digest  bytea NOT NULL,
	version bigint NOT NULL DEFAULT nextval('template_version_seq')
);

-- keygate_check fails the transaction unless ok, as a serialization
-- failure (which the gateway retries): for a condition a statement checks
-- without its answer being read before the commit, such as "the template
-- this create remembers has not changed".
CREATE FUNCTION keygate_check(ok boolean, what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	IF ok IS NOT TRUE THEN
		RAISE EXCEPTION 'keygate: % changed meanwhile', what USING ERRCODE = 'serialization_failure';
	END IF;
END
$$;

-- The copy of a template's text made at creation, shared by the contracts
-- made from the same text (contracts.document_digest). No counter, and no
-- foreign key from contracts either: both would make every create from one
-- template write or lock this one row (a foreign key check locks the row
-- it finds, and concurrent lockers of one row cost a MultiXact each), which
-- serialised creates. A create holds the document with an advisory lock on
-- its digest, shared; the release after a contract's delete takes it
-- exclusive before it deletes a document no contract holds
-- (PostgresBackend.HoldTemplate, ReleaseDocument).
CREATE TABLE contract_documents (
	digest   bytea PRIMARY KEY,
	document bytea NOT NULL
);

-- One row a contract with every column search filters, orders and counts
-- on, and nothing else: a search that must look at every contract (a
-- substring without a trigram to look up, or one that most contracts
-- hold) reads this narrow table, not the records, as bbolt reads its
-- compact rows. created and expires are Unix milliseconds, as the API
-- shows them; status is the stored status (0 sent, 1 ongoing, 2 rejected,
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
	document_digest bytea NOT NULL
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

-- Each contract's record, the exact bytes the Go code encoded, beside its
-- row of contracts (same id; the backend writes and deletes both in one
-- statement).
CREATE TABLE contract_records (
	id     uuid PRIMARY KEY,
	record bytea NOT NULL
);

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
