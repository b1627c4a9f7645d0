// Package notify gets the ledger's notification events to people: a
// delivery worker that sends the outbox's entries to sinks (a signed
// generic webhook, Slack, and for on-call people PagerDuty, Microsoft
// Teams and email: pagerduty.go, teams.go, email.go), and Slack's
// interactivity endpoint, which turns an Approve or Reject click into the
// engine's decision.
//
// # Delivery
//
// The ledger writes an event to its outbox in the same store transaction
// as the decision that caused it, once for each sink the route names
// (ledger.Options.Route, built here by Router from the config's notify
// routes). The Worker runs a loop per sink, each claiming only its own
// sink's due entries through the engine's writer (so of several replicas
// sharing a PostgreSQL ledger one delivers each entry), so that a sink that
// hangs, is slow or has a backlog delays no other sink's deliveries. It
// sends each entry to its sink, one after another in the order they were
// recorded, and marks it delivered, or failed and due again
// after an exponential backoff (Backoff doubling from one second, capped at
// MaxBackoff, with a tenth of jitter), or dead after MaxAttempts tries. A
// sink that fails three deliveries in a row is taken as down: a breaker in
// the worker's memory pauses its deliveries, Backoff doubling up to a
// minute, and then one entry probes it, so a dead sink costs two ledger
// writes per probe, not two per entry per retry (issue 32). A
// dead letter stays in the outbox for the operator (GET /v1/outbox?dead=true)
// until the effects' retention. Delivery is at least once: a crash between a
// send and its record sends again, with the same event id, which a receiver
// dedupes by.
//
// # Webhook signatures
//
// A webhook receives each event as a JSON object (ledger.Event: id, type,
// at, namespace, effect_id, …; never payloads, idempotency keys,
// dimension values or tokens) in a POST with these headers:
//
//	Ratchet-Event-Id:   evt_…            (the same on every retry)
//	Ratchet-Event-Type: approval.requested
//	Ratchet-Timestamp:  1767225600       (Unix seconds when this attempt was sent)
//	Ratchet-Signature:  v1=<hex>
//
// where <hex> is the lowercase hex HMAC-SHA256, keyed with the sink's
// secret (the bytes of the secret file or variable, surrounding whitespace
// trimmed), of the timestamp, a ".", and the raw body. A receiver
// recomputes it over the body as received, compares in constant time,
// refuses a timestamp more than five minutes from its own clock (a replay
// window: a captured request cannot be sent again later), and dedupes by
// the event id within that window. VerifyWebhook does all of that but the
// dedupe. Any 2xx answer is a delivery; anything else, or no answer within
// the timeout, is tried again. A redirect is not followed (it would send
// the signed event wherever the receiver points): it is a failed delivery,
// so configure the final URL.
//
// # Slack
//
// The Slack sink posts a message per approval request with Approve and
// Reject buttons (Block Kit), remembers where it posted it (in the ledger,
// as a sink reference), and updates that message in place when the request
// is decided (by a click, the CLI or the admin API) or expires. Other
// events are posted as plain messages. SlackInteractions serves Slack's
// interactivity requests on a listener of its own (notify.sinks[].listen),
// never on the admin listener: Slack must reach it from the internet, and
// the admin API must not be. It verifies Slack's request signature with the
// app's signing secret and refuses a timestamp more than five minutes old
// (401), lets only the configured Slack user ids decide (403 for anyone
// else), decides only an approval whose request this sink posted and only
// from the message it posted it in (the button's block id, the message's
// timestamp and channel; 400 or 403 otherwise), and records the decision
// as decided_by "slack:<user id>".
//
// What an agent writes (run and agent ids, effect types, reasons) reaches
// the approver inert: each value is escaped as Slack's formatting rules
// require (&, < and >, so that no link, mention or <!channel> can come
// from it), has its backticks replaced, and sits in a code span of its own;
// the notification text is sent with mrkdwn off.
package notify
