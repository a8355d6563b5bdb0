// Package notify is the durable outbox of e-mails and text messages and the
// worker that delivers them.
//
// A change and the notification it causes must commit together, so that a
// crash neither loses a notification nor sends one for a change that never
// happened. Callers therefore enqueue inside their own write transaction
// (Outbox.Enqueue with a storage.Tx); the outbox wakes its worker when that
// transaction commits. The worker takes due messages one by one, sends each
// with no database transaction open, deletes a message only after its
// sender reported success, and reschedules a failed one with exponential
// backoff and jitter until it gives up. While queued, a message's subject,
// bodies and attachments are sealed under the master key: they carry
// one-time passwords and signing links.
//
// The queue is a Backend: bbolt (one process; bolt.go) or PostgreSQL
// (postgres.go), where several gateway instances deliver from one
// database. There a message is taken with FOR UPDATE SKIP LOCKED and a
// lease (WorkerConfig.Lease), so that no two instances send it at once and
// a message whose instance died is taken again when the lease ends; a
// commit that enqueues wakes every instance through LISTEN/NOTIFY.
//
// Delivery is exactly once as long as the process does not die between a
// successful send and the deletion that follows it; a crash in that window
// sends the message again after restart (at least once). SMTP cannot do
// better: a server may accept a message whose acceptance the client never
// hears of. Redelivered e-mails keep their Message-ID so that mail clients
// can fold the copies, and .eml files are written under a stable name, so a
// redelivery replaces the earlier file instead of adding one.
//
// Senders: SMTPSender (github.com/wneessen/go-mail), EMLSender (one RFC 5322
// file per message, for deployments without SMTP) and SMSSender (an HTTP
// shipper that takes {"to","from","text"} with a bearer token).
package notify
