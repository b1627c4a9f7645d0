package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Email is the email sink: a plain-text mail per event over SMTP, with
// the event's console link (the approval's page for an approval request).
//
// The connection is upgraded with STARTTLS (RFC 3207) before anything else
// is said, and the server's certificate is verified, so that credentials
// and what the mail says never cross the network in the clear: a server
// that does not offer STARTTLS is a failed delivery, never a plain one.
// Only a relay on this machine may be spoken to without it (NoTLS, which
// the config allows only for a loopback address). The password comes from
// a file or the environment; authentication is PLAIN (RFC 4616), over TLS
// only. Each mail's Message-ID is derived from the event id, the same on
// every retry, so that a retried delivery is one message to a mail client
// that dedupes. The body is text/plain: no markup an agent's values could
// use, and no payloads.
type Email struct {
	// Addr is the SMTP server's host:port (submission: 587). Required.
	Addr string
	// From is the envelope and header sender; To the recipients. Required.
	From string
	To   []string
	// Username and Password, when Username is set, authenticate (PLAIN).
	Username, Password string
	// NoTLS speaks to the server without STARTTLS: for a relay on
	// loopback only.
	NoTLS bool
	// TLSConfig verifies the server; nil means the system's roots and
	// the host of Addr. Its ServerName, when empty, is that host.
	TLSConfig *tls.Config
	// ConsoleURL, when set, is the console's address: each mail links the
	// event's page (see ConsoleLink).
	ConsoleURL string
	// Hello is the name said in EHLO; empty means "localhost".
	Hello string
	// Now is the clock of the Date header; nil means time.Now.
	Now func() time.Time
}

var _ Sink = (*Email)(nil)

// Deliver implements Sink.
func (m *Email) Deliver(ctx context.Context, en ledger.OutboxEntry) error {
	msg, err := m.message(en.Event)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPermanent, err)
	}
	host, _, err := net.SplitHostPort(m.Addr)
	if err != nil {
		return fmt.Errorf("%w: the SMTP address %q: %v", ErrPermanent, m.Addr, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", m.Addr)
	if err != nil {
		return fmt.Errorf("connecting to the SMTP server: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		return fmt.Errorf("the SMTP server's greeting: %w", err)
	}
	defer c.Close()
	hello := m.Hello
	if hello == "" {
		hello = "localhost"
	}
	if err := c.Hello(hello); err != nil {
		return fmt.Errorf("EHLO: %w", err)
	}
	if !m.NoTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return errors.New("the SMTP server does not offer STARTTLS: nothing is sent in the clear (use a server that does)")
		}
		cfg := &tls.Config{}
		if m.TLSConfig != nil {
			cfg = m.TLSConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
		cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
		if err := c.StartTLS(cfg); err != nil {
			return fmt.Errorf("STARTTLS: %w", err)
		}
	}
	if m.Username != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return errors.New("the SMTP server offers no AUTH, and a username is configured")
		}
		if err := c.Auth(smtp.PlainAuth("", m.Username, m.Password, host)); err != nil {
			return fmt.Errorf("SMTP authentication as %s: %w", m.Username, err)
		}
	}
	if err := c.Mail(m.From); err != nil {
		return smtpRefused("MAIL FROM", err)
	}
	for _, to := range m.To {
		if err := c.Rcpt(to); err != nil {
			return smtpRefused("RCPT TO "+to, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return smtpRefused("DATA", err)
	}
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("sending the mail: %w", err)
	}
	if err := w.Close(); err != nil {
		return smtpRefused("the mail", err)
	}
	c.Quit() // the server took the mail at the end of DATA
	return nil
}

// smtpRefused is a refusal of the mail: a 5xx reply is for good (an
// unknown recipient, a sender not allowed), a dead letter at once;
// anything else is tried again.
func smtpRefused(doing string, err error) error {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 {
		return fmt.Errorf("%w: the SMTP server refused %s: %v", ErrPermanent, doing, err)
	}
	return fmt.Errorf("the SMTP server refused %s: %w", doing, err)
}

// message is the RFC 5322 mail of ev.
func (m *Email) message(ev ledger.Event) ([]byte, error) {
	title, lines := plainText(ev)
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	var b bytes.Buffer
	header := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	header("From", m.From)
	header("To", strings.Join(m.To, ", "))
	// Each encoded word on a line of its own (RFC 2047 section 2: the
	// space between encoded words is not shown): an agent's id of 255
	// emoji made a Subject of one line of thousands of characters, over
	// RFC 5322's 998, which servers refuse (a dead letter at once).
	header("Subject", strings.ReplaceAll(mime.QEncoding.Encode("utf-8", "[Ratchet] "+title), "?= =?", "?=\r\n =?"))
	header("Date", now().Format(time.RFC1123Z))
	header("Message-ID", "<"+strings.Map(msgIDRune, ev.ID)+"@ratchet>")
	header("Auto-Submitted", "auto-generated")
	header("Ratchet-Event-Id", strings.Map(msgIDRune, ev.ID))
	header("Ratchet-Event-Type", strings.Map(msgIDRune, ev.Type))
	header("MIME-Version", "1.0")
	header("Content-Type", `text/plain; charset="utf-8"`)
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	var text strings.Builder
	text.WriteString(title + "\r\n\r\n")
	for _, l := range lines {
		text.WriteString(l + "\r\n")
	}
	if link := ConsoleLink(m.ConsoleURL, ev); link != "" {
		text.WriteString("\r\nOpen in the Ratchet console: " + link + "\r\n")
	}
	text.WriteString("\r\nEvent " + inert(ev.ID) + " (" + inert(ev.Type) + ") at " + ev.At.UTC().Format(time.RFC3339) + ".\r\n")
	if _, err := qp.Write([]byte(text.String())); err != nil {
		return nil, err
	}
	if err := qp.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// msgIDRune keeps the characters of an event id or type that may stand in
// a Message-ID or a header (they are Ratchet's own: letters, digits, _ . -).
func msgIDRune(r rune) rune {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
		return r
	}
	return -1
}
