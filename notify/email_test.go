package notify_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// testCert is a self-signed certificate for 127.0.0.1 and localhost, and
// a pool that trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ratchet test smtp"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// smtpServer is a real SMTP server (github.com/emersion/go-smtp) on
// loopback, offering STARTTLS with a test certificate and AUTH PLAIN, and
// refusing authentication in the clear, as a submission server does. It
// records each mail with whether the connection was TLS when it came.
type smtpServer struct {
	addr     string
	user     string
	password string
	mu       sync.Mutex
	mails    []receivedMail
	commands []string // MAIL FROM / RCPT TO seen
}

type receivedMail struct {
	from, authed string
	to           []string
	tls          bool
	data         []byte
}

func startSMTP(t *testing.T, withTLS bool) (*smtpServer, *x509.CertPool) {
	t.Helper()
	s := &smtpServer{user: "ratchet", password: "smtp-pa55word"}
	cert, pool := testCert(t)
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &smtpSession{srv: s, conn: c}, nil }))
	srv.Domain = "localhost"
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	if withTLS {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	srv.AllowInsecureAuth = false
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s, pool
}

func (s *smtpServer) snapshot() ([]receivedMail, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]receivedMail(nil), s.mails...), append([]string(nil), s.commands...)
}

type smtpSession struct {
	srv    *smtpServer
	conn   *smtp.Conn
	authed string
	cur    receivedMail
}

func (s *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *smtpSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != s.srv.user || pass != s.srv.password {
			return errors.New("invalid credentials")
		}
		s.authed = user
		return nil
	}), nil
}

func (s *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	s.srv.mu.Lock()
	s.srv.commands = append(s.srv.commands, "MAIL FROM "+from)
	s.srv.mu.Unlock()
	if s.authed == "" {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	}
	_, isTLS := s.conn.TLSConnectionState()
	s.cur = receivedMail{from: from, authed: s.authed, tls: isTLS}
	return nil
}

func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if !strings.HasSuffix(to, "@example.com") {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such user"}
	}
	s.cur.to = append(s.cur.to, to)
	return nil
}

func (s *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.data = b
	s.srv.mu.Lock()
	s.srv.mails = append(s.srv.mails, s.cur)
	s.srv.mu.Unlock()
	return nil
}

func (s *smtpSession) Reset()        { s.cur = receivedMail{} }
func (s *smtpSession) Logout() error { return nil }

// An approval request reaches the approvers by mail, over a connection
// upgraded with STARTTLS (the server's certificate verified) before the
// credentials are sent, with the approval's console link and without the
// payload or the idempotency key.
func TestAnEmailGoesOverSTARTTLSWithTheApprovalsConsoleLink(t *testing.T) {
	srv, pool := startSMTP(t, true)
	eng := newEngine(t, []notify.Route{{Sinks: []string{"mail"}}})
	runWorker(t, &notify.Worker{Outbox: eng, Poll: 5 * time.Millisecond, Sinks: map[string]notify.Sink{"mail": &notify.Email{
		Addr: srv.addr, From: "ratchet@example.com", To: []string{"approvers@example.com", "oncall@example.com"},
		Username: srv.user, Password: srv.password, TLSConfig: &tls.Config{RootCAs: pool}, ConsoleURL: "https://ratchet.example.com"}}})
	res := askApproval(t, eng, "order-1")
	eventually(t, 3*time.Second, "the mail arrives", func() bool { mails, _ := srv.snapshot(); return len(mails) == 1 })
	mails, _ := srv.snapshot()
	m := mails[0]
	if !m.tls {
		t.Errorf("the mail came over a connection without TLS")
	}
	if m.authed != srv.user {
		t.Errorf("the mail came authenticated as %q, want %q", m.authed, srv.user)
	}
	if got := strings.Join(m.to, ","); got != "approvers@example.com,oncall@example.com" {
		t.Errorf("recipients %s", got)
	}
	msg, err := mail.ReadMessage(bytes.NewReader(m.data))
	if err != nil {
		t.Fatalf("not a mail: %v\n%s", err, m.data)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "[Ratchet] Approval requested: payment.charge for $150.00"; subject != want {
		t.Errorf("subject %q, want %q", subject, want)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil {
		t.Fatal(err)
	}
	if link := "https://ratchet.example.com/approvals/" + res.ApprovalID; !strings.Contains(string(body), link) {
		t.Errorf("the body has no link to %s:\n%s", link, body)
	}
	if strings.Contains(string(m.data), `"amount"`) || strings.Contains(string(m.data), "order-1") {
		t.Errorf("the mail carries the payload or the idempotency key:\n%s", m.data)
	}
	if id := msg.Header.Get("Message-ID"); !strings.HasPrefix(id, "<evt_") {
		t.Errorf("Message-ID %q is not derived from the event id", id)
	}
}

// A server that offers no STARTTLS gets nothing: not the credentials, not
// the mail. The delivery fails (and is retried, then dead-lettered) rather
// than going out in the clear.
func TestAnEmailIsNeverSentInTheClearToAServerWithoutSTARTTLS(t *testing.T) {
	srv, _ := startSMTP(t, false)
	m := &notify.Email{Addr: srv.addr, From: "ratchet@example.com", To: []string{"oncall@example.com"}, Username: srv.user, Password: srv.password}
	err := m.Deliver(context.Background(), ledger.OutboxEntry{Event: ledger.Event{ID: "evt_1", Type: ledger.EventHaltStarted, HaltID: "hlt_1"}})
	if err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Errorf("delivery to a server without STARTTLS: %v, want a failure naming STARTTLS", err)
	}
	mails, cmds := srv.snapshot()
	if len(mails) != 0 || len(cmds) != 0 {
		t.Errorf("the server without STARTTLS got mails %d, commands %v; want none", len(mails), cmds)
	}
}

// A server whose certificate does not verify (here: not trusted) gets
// nothing either.
func TestAnEmailIsNotSentToAServerWhoseCertificateDoesNotVerify(t *testing.T) {
	srv, _ := startSMTP(t, true)
	m := &notify.Email{Addr: srv.addr, From: "ratchet@example.com", To: []string{"oncall@example.com"}, Username: srv.user, Password: srv.password}
	err := m.Deliver(context.Background(), ledger.OutboxEntry{Event: ledger.Event{ID: "evt_1", Type: ledger.EventHaltStarted, HaltID: "hlt_1"}})
	if err == nil {
		t.Fatal("delivered to a server with an untrusted certificate")
	}
	if mails, cmds := srv.snapshot(); len(mails) != 0 || len(cmds) != 0 {
		t.Errorf("the server got mails %d, commands %v; want none", len(mails), cmds)
	}
}

// A recipient the server refuses for good (550) is a dead letter at once.
func TestAnEmailToARecipientRefusedForGoodIsPermanent(t *testing.T) {
	srv, pool := startSMTP(t, true)
	m := &notify.Email{Addr: srv.addr, From: "ratchet@example.com", To: []string{"nobody@elsewhere.test"}, Username: srv.user, Password: srv.password,
		TLSConfig: &tls.Config{RootCAs: pool}}
	err := m.Deliver(context.Background(), ledger.OutboxEntry{Event: ledger.Event{ID: "evt_1", Type: ledger.EventHaltStarted, HaltID: "hlt_1"}})
	if !isPermanent(err) {
		t.Errorf("a 550 for the recipient: %v, want a permanent failure", err)
	}
}

// An agent's id is its own to choose (up to 255 characters, emoji
// included), and the title of an integration warning names it: its mail
// still goes out, with every header line within RFC 5322's 998
// characters (a real server, go-smtp, refuses a line over 2,000 with a
// 500, which would dead-letter the mail at once), and says the id.
func TestAnAgentsLongUnicodeIDCannotKeepItsMailFromBeingSent(t *testing.T) {
	srv, pool := startSMTP(t, true)
	m := &notify.Email{Addr: srv.addr, From: "ratchet@example.com", To: []string{"oncall@example.com"}, Username: srv.user, Password: srv.password,
		TLSConfig: &tls.Config{RootCAs: pool}}
	agent := strings.Repeat("💸", 255)
	ev := ledger.Event{ID: "evt_1", Type: ledger.EventIntegrationWarning, Namespace: "default", AgentID: agent, RunID: strings.Repeat("€", 255), Count: 3}
	if err := m.Deliver(context.Background(), ledger.OutboxEntry{Event: ev}); err != nil {
		t.Fatalf("delivery: %v", err)
	}
	mails, _ := srv.snapshot()
	if len(mails) != 1 {
		t.Fatalf("%d mails arrived, want 1", len(mails))
	}
	head, _, _ := bytes.Cut(mails[0].data, []byte("\r\n\r\n"))
	for i, l := range strings.Split(string(head), "\r\n") {
		if len(l) > 998 {
			t.Errorf("header line %d is %d characters, over RFC 5322's 998", i+1, len(l))
		}
	}
	msg, err := mail.ReadMessage(bytes.NewReader(mails[0].data))
	if err != nil {
		t.Fatal(err)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(subject, strings.Repeat("💸", 200)+"…") {
		t.Errorf("subject %q does not name the agent (clipped)", subject)
	}
}
