-- Sealed documents (docseal): the SHA-256 of each sealed PDF of a
-- completed contract, written in the completion's transaction, so that
-- /verify can say which contract a file is from its hash alone.
CREATE TABLE sealed_documents (
	sha256      bytea PRIMARY KEY,
	contract_id uuid NOT NULL
);
CREATE INDEX sealed_documents_contract ON sealed_documents (contract_id);
