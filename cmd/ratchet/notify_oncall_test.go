package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/config"
)

// posts records the JSON bodies POSTed to it and answers 202, as
// PagerDuty's Events API v2 and a Teams Workflows webhook do (their
// request shapes are checked by the notify package's fakes; this test is
// about serve wiring the sinks from the config, with their secrets).
type posts struct {
	mu     sync.Mutex
	bodies []map[string]any
	urls   []string
}

func (p *posts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m map[string]any
	json.NewDecoder(r.Body).Decode(&m)
	p.mu.Lock()
	p.bodies, p.urls = append(p.bodies, m), append(p.urls, r.URL.String())
	p.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

func (p *posts) snapshot() ([]map[string]any, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]map[string]any(nil), p.bodies...), append([]string(nil), p.urls...)
}

// mailbox is a real SMTP server (go-smtp) that offers STARTTLS and AUTH
// PLAIN (never in the clear) and keeps the mails it takes.
type mailbox struct {
	mu    sync.Mutex
	mails [][]byte
}

type mailSession struct {
	box    *mailbox
	authed bool
}

func (s *mailSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *mailSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "ratchet" || pass != "smtp-pa55word" {
			return errors.New("invalid credentials")
		}
		s.authed = true
		return nil
	}), nil
}
func (s *mailSession) Mail(string, *smtp.MailOptions) error {
	if !s.authed {
		return &smtp.SMTPError{Code: 530, Message: "Authentication required"}
	}
	return nil
}
func (s *mailSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *mailSession) Data(r io.Reader) error {
	b, _ := io.ReadAll(r)
	s.box.mu.Lock()
	s.box.mails = append(s.box.mails, b)
	s.box.mu.Unlock()
	return nil
}
func (s *mailSession) Reset()        {}
func (s *mailSession) Logout() error { return nil }

// startMailbox starts the SMTP server with a self-signed certificate for
// 127.0.0.1, written as PEM to caFile for the sink's ca_file.
func startMailbox(t *testing.T, caFile string) (*mailbox, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mailbox"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, BasicConstraintsValid: true, IsCA: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	box := &mailbox{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &mailSession{box: box}, nil }))
	srv.Domain, srv.TLSConfig = "localhost", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return box, ln.Addr().String()
}

// A real serve wires the PagerDuty, Teams and email sinks from the config,
// their secrets read from files and the environment: an approval request
// reaches Teams with a button to its console page and the mailbox (over
// STARTTLS, verified with ca_file) with the same link; a halt pages, and
// lifting it resolves the page. No secret appears in serve's log.
func TestServeDeliversToPagerDutyTeamsAndEmail(t *testing.T) {
	dir := t.TempDir()
	pager, teams := &posts{}, &posts{}
	pagerSrv, teamsSrv := httptest.NewServer(pager), httptest.NewServer(teams)
	defer pagerSrv.Close()
	defer teamsSrv.Close()
	caFile := filepath.Join(dir, "smtp-ca.pem")
	box, smtpAddr := startMailbox(t, caFile)
	const routingKey = "R0UT1NGKEYR0UT1NGKEYR0UT1NGKEY01"
	writeFile(t, filepath.Join(dir, "routing-key"), routingKey+"\n")
	writeFile(t, filepath.Join(dir, "smtp-password"), "smtp-pa55word\n")
	teamsURL := teamsSrv.URL + "/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&sig=S3CRETSIG"
	t.Setenv("RATCHET_TEST_TEAMS_URL", teamsURL)
	extra := `policies:
  - match: "payment.*"
    approval_threshold_micros: 100000000
notify:
  console_url: https://ratchet.example.com
  sinks:
    - {name: pager, type: pagerduty, url: "` + pagerSrv.URL + `/v2/enqueue", routing_key_file: "` + filepath.Join(dir, "routing-key") + `"}
    - {name: teams, type: teams, url_env: RATCHET_TEST_TEAMS_URL}
    - {name: mail, type: email, address: "` + smtpAddr + `", from: ratchet@example.com, to: [approvers@example.com],
       username: ratchet, password_file: "` + filepath.Join(dir, "smtp-password") + `", ca_file: "` + caFile + `"}
  routes:
    - {sinks: [pager], events: [halt.started, halt.lifted]}
    - {sinks: [teams, mail], events: [approval.requested]}
`
	s := startServe(t, filepath.Join(dir, "data"), extra)
	cs := connect(t, s.mcp)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
		"idempotency_key": "invoice:1", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}})
	if err != nil || res.IsError {
		t.Fatalf("begin: %v %+v", err, res)
	}
	approvalID, _ := res.StructuredContent.(map[string]any)["approval_id"].(string)
	link := "https://ratchet.example.com/approvals/" + approvalID

	waitFor(t, 10*time.Second, "the Teams card", func() bool { b, _ := teams.snapshot(); return len(b) == 1 })
	cards, urls := teams.snapshot()
	if !strings.Contains(urls[0], "sig=S3CRETSIG") {
		t.Errorf("Teams was posted at %s, not the URL from url_env", urls[0])
	}
	if b, _ := json.Marshal(cards[0]); !strings.Contains(string(b), `"url":"`+link+`"`) {
		t.Errorf("the card has no button to %s: %s", link, b)
	}
	waitFor(t, 10*time.Second, "the mail", func() bool { box.mu.Lock(); defer box.mu.Unlock(); return len(box.mails) == 1 })
	box.mu.Lock()
	mail := string(bytes.ReplaceAll(box.mails[0], []byte("=\r\n"), nil))
	box.mu.Unlock()
	if !strings.Contains(mail, link) {
		t.Errorf("the mail has no link to %s:\n%s", link, mail)
	}

	admin := func(path, body string) map[string]any {
		t.Helper()
		resp, err := http.Post(s.admin+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %d %v", path, resp.StatusCode, out)
		}
		return out
	}
	halt := admin("/v1/halts", `{"all":true,"note":"incident 42"}`)
	haltID, _ := halt["halt_id"].(string)
	waitFor(t, 10*time.Second, "the page", func() bool { b, _ := pager.snapshot(); return len(b) == 1 })
	admin("/v1/halts/"+haltID+"/lift", `{}`)
	waitFor(t, 10*time.Second, "the resolve", func() bool { b, _ := pager.snapshot(); return len(b) == 2 })
	pages, _ := pager.snapshot()
	var got []string
	for _, p := range pages {
		got = append(got, p["event_action"].(string)+" "+p["dedup_key"].(string)+" "+p["routing_key"].(string))
	}
	want := []string{"trigger ratchet:halt:" + haltID + " " + routingKey, "resolve ratchet:halt:" + haltID + " " + routingKey}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what PagerDuty got (-want +got):\n%s", diff)
	}
	for _, secret := range []string{routingKey, "S3CRETSIG", "smtp-pa55word"} {
		if strings.Contains(s.stderr.String(), secret) {
			t.Errorf("serve's log holds a secret (%s)", secret)
		}
	}
}

// A Teams Workflows URL is read from its file or variable when serve
// starts, and its sig parameter is the secret that lets anyone post to
// the channel: one that is not an https URL (http only on loopback, a
// local fake) is refused then, by an error that never quotes it.
func TestATeamsURLInTheClearOrNotAURLIsRefusedWithoutQuotingIt(t *testing.T) {
	for name, c := range map[string]struct {
		url string
		ok  bool
	}{
		"http off loopback": {"http://prod.westus.logic.azure.com/workflows/abc/triggers/manual/paths/invoke?sig=S3CRETSIG", false},
		"no scheme":         {"prod.westus.logic.azure.com/workflows/abc?sig=S3CRETSIG", false},
		"not a URL":         {"sig=S3CRETSIG\x7f://", false},
		"https":             {"https://prod.westus.logic.azure.com/workflows/abc/triggers/manual/paths/invoke?sig=S3CRETSIG", true},
		"http on loopback":  {"http://127.0.0.1:9/workflows/abc?sig=S3CRETSIG", true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("RATCHET_TEST_TEAMS_URL", c.url)
			_, _, err := onCallSink(config.NotifySink{Name: "teams", Type: "teams", URLEnv: "RATCHET_TEST_TEAMS_URL"}, "https://ratchet.example.com")
			if got := err == nil; got != c.ok {
				t.Fatalf("accepted %v, want %v (err %v)", got, c.ok, err)
			}
			if err != nil && strings.Contains(err.Error(), "S3CRETSIG") {
				t.Errorf("the error quotes the secret URL: %v", err)
			}
		})
	}
}
