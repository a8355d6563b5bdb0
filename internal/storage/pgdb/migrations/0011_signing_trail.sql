-- The trail of each contract's signing (signing.TrailEvent): every step
-- the certificate of completion lists, written in the transaction of the
-- change it records, kept while the contract exists. record holds the
-- exact JSON the Go code encoded, as bbolt keeps it; id orders the steps.
CREATE TABLE signing_trail (
	id          bigserial PRIMARY KEY,
	contract_id uuid NOT NULL,
	record      bytea NOT NULL
);
CREATE INDEX signing_trail_contract ON signing_trail (contract_id, id);
