-- The completions whose documents wait to be made and sealed
-- (signing.Backend QueueSeal): written in the transaction of the last
-- signature, deleted in the one that stores the sealed documents, so that
-- a completion is never lost between the two, whichever instance seals.
CREATE TABLE signing_seal_queue (
	contract_id uuid PRIMARY KEY,
	queued      timestamptz NOT NULL
);
CREATE INDEX signing_seal_queue_queued ON signing_seal_queue (queued);
