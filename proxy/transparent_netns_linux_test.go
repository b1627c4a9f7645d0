package proxy_test

// The done-when test of transparent mode (issue 24), on real network
// namespaces, veth pairs and iptables rules:
//
//	netns "app" (the pod)                    netns "net" (the internet)
//	  app (UID 1000, no proxy settings)        198.18.7.2 api.stripe.com :443 (fake, test CA), :80
//	  Ratchet (UID 65532), 127.0.0.1:15001     198.18.7.3 allowed.test   :443 (test CA)
//	    and [::1]:15001          ── veth ──    198.18.7.4 refused.test   :443 (test CA)
//	  iptables, ip6tables: TransparentRules    fd00:7::3  allowed6.test  :443 (test CA)
//	  /etc/hosts: the names                    fd00:7::2  stripe6.test (intercept_hosts: never dialled)
//
// The app and Ratchet run as helper processes: this test binary again,
// under `ip netns exec` (which mounts /etc/netns/<app>/hosts over
// /etc/hosts, so both resolve the names there, as a pod's containers share
// DNS), each dropping to its UID. The servers of "net" run in this process
// on sockets opened inside that namespace. The test skips only where the
// machine cannot create namespaces; CI sets RATCHET_REQUIRE_NETNS, and then
// it fails instead.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ratchet-mcp/ratchet/internal/suites"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
	"github.com/ratchet-mcp/ratchet/proxy"
)

const (
	netnsRoleEnv  = "RATCHET_NETNS_ROLE"
	netnsDirEnv   = "RATCHET_NETNS_DIR"
	netnsStepsEnv = "RATCHET_NETNS_STEPS"
	ratchetUID    = 65532 // the Dockerfile's, which the manifests' rules exclude
	appUID        = 1000
	transparentAt = "127.0.0.1:15001"
	stripeIP      = "198.18.7.2"
	allowedIP     = "198.18.7.3"
	refusedIP     = "198.18.7.4"
	// IPv6: the app and, in "net", allowed6.test; stripe6.test is one of
	// Stripe's hosts by proxy.intercept_hosts, whose address Ratchet never
	// dials (intercepted traffic goes to the vendor's upstream).
	appIP6     = "fd00:7::1"
	stripe6IP  = "fd00:7::2"
	allowed6IP = "fd00:7::3"
	testCAName = "Ratchet netns test CA (the public roots)"
)

func TestTransparentNetns(t *testing.T) {
	switch os.Getenv(netnsRoleEnv) {
	case "ratchet":
		ratchetRole(t)
		return
	case "app":
		appRole(t)
		return
	}
	topo := newTopology(t)
	dir := topo.dir

	// The test CA plays the public roots: the fake vendor's and the other
	// hosts' certificates chain to it, Ratchet trusts it for its upstream
	// calls, and the app trusts it beside Ratchet's CA.
	ca := newTestCA(t)
	writeFile(t, filepath.Join(dir, "roots.pem"), ca.pem, 0o644)
	rdir := filepath.Join(dir, "ratchet")
	if err := os.Mkdir(rdir, 0o700); err != nil {
		t.Fatal(err)
	}
	rca, err := proxy.LoadOrCreateCA(filepath.Join(rdir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	chownAll(t, rdir, ratchetUID)
	writeFile(t, filepath.Join(dir, "app-trust.pem"), append(append([]byte{}, ca.pem...), rca.PEM()...), 0o644)

	// The internet.
	var mu sync.Mutex
	var stripeReqs []http.Header
	var refusedConns, plainHits int
	stripeSrv := serveTLSIn(t, topo.net, stripeIP+":443", ca.leaf(t, "api.stripe.com"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		stripeReqs = append(stripeReqs, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_fake")
		io.WriteString(w, `{"id":"pi_netns_1","object":"payment_intent","amount":2000,"currency":"usd","status":"requires_payment_method"}`)
	}))
	allowedLeaf := ca.leaf(t, "allowed.test")
	serveTLSIn(t, topo.net, allowedIP+":443", allowedLeaf, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from allowed.test")
	}))
	serveTLSIn(t, topo.net, "["+allowed6IP+"]:443", ca.leaf(t, "allowed6.test"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from allowed6.test over "+r.RemoteAddr)
	}))
	refusedLn := listenIn(t, topo.net, refusedIP+":443")
	go func() {
		for {
			c, err := refusedLn.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			refusedConns++
			mu.Unlock()
			c.Close()
		}
	}()
	plainSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		plainHits++
		mu.Unlock()
	})}
	go plainSrv.Serve(listenIn(t, topo.net, stripeIP+":80"))
	t.Cleanup(func() { plainSrv.Close() })
	_ = stripeSrv

	// The pod's rules, as `ratchet transparent rules --apply` installs
	// them; applied twice, as a restarted init container would.
	cmds, err := proxy.TransparentRules(proxy.RulesOptions{ListenPort: 15001, ExcludeUID: ratchetUID})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		topo.applyRules(t, cmds)
	}
	if out := topo.inApp(t, "iptables", "-w", "-t", "nat", "-S", "OUTPUT"); strings.Count(out, "-j "+proxy.RulesChain) != 1 {
		t.Fatalf("the rules applied twice are not one set:\n%s", out)
	}

	// Ratchet, the sidecar.
	rat := startRole(t, topo, "ratchet", ratchetRoleEnv(dir, rdir))
	rat.waitFor(t, "READY")

	// The app: no proxy settings, only the CA to trust.
	app := startRole(t, topo, "app", []string{"SSL_CERT_FILE=" + filepath.Join(dir, "app-trust.pem")})
	line := app.waitFor(t, "RESULT ")
	var res appResult
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &res); err != nil {
		t.Fatal(err)
	}
	app.wait(t)
	counters := topo.counters(t)

	// Then rules that exclude another UID than Ratchet's: its own call to
	// allowed.test comes back to it, and is refused as a loop instead of
	// going round and round.
	wrong, err := proxy.TransparentRules(proxy.RulesOptions{ListenPort: 15001, ExcludeUID: ratchetUID + 1})
	if err != nil {
		t.Fatal(err)
	}
	topo.applyRules(t, wrong)
	app = startRole(t, topo, "app", []string{"SSL_CERT_FILE=" + filepath.Join(dir, "app-trust.pem"), netnsStepsEnv + "=loop"})
	var loop appResult
	if err := json.Unmarshal([]byte(strings.TrimPrefix(app.waitFor(t, "RESULT "), "RESULT ")), &loop); err != nil {
		t.Fatal(err)
	}
	app.wait(t)
	rat.stop(t)
	logs := rat.stderr.String()
	t.Logf("app saw: %+v", res)

	// 1. The Stripe request, by name: intercepted (Ratchet's certificate),
	// gated, stamped with Ratchet's key, forwarded to the fake once.
	pay, again := res.Steps["pay"], res.Steps["retry"]
	if pay.Status != 200 {
		t.Fatalf("pay.Status != 200: the payment was not intercepted and executed: %+v (ratchet log:\n%s)", pay, logs)
	}
	if pay.Decision != "execute" {
		t.Fatalf("pay.Decision != \"execute\": the payment was not intercepted and executed: %+v (ratchet log:\n%s)", pay, logs)
	}
	if pay.Issuer != "Ratchet proxy CA" {
		t.Fatalf("pay.Issuer != \"Ratchet proxy CA\": the payment was not intercepted and executed: %+v (ratchet log:\n%s)", pay, logs)
	}
	if !strings.Contains(pay.Body, "pi_netns_1") {
		t.Fatalf("!strings.Contains(pay.Body, \"pi_netns_1\"): the payment was not intercepted and executed: %+v (ratchet log:\n%s)", pay, logs)
	}
	mu.Lock()
	if len(stripeReqs) != 2 {
		t.Fatalf("the fake Stripe got %d requests, want 2 (the payment and the one over IPv6; the retry is replayed)", len(stripeReqs))
	}
	got := stripeReqs[0].Get("Idempotency-Key")
	mu.Unlock()
	if got == "" {
		t.Fatalf("got == \"\": the fake Stripe got Idempotency-Key %q; Ratchet says it stamped %q (the caller's was order-42)", got, pay.VendorKey)
	}
	if got == "order-42" {
		t.Fatalf("got == \"order-42\": the fake Stripe got Idempotency-Key %q; Ratchet says it stamped %q (the caller's was order-42)", got, pay.VendorKey)
	}
	if got != pay.VendorKey {
		t.Fatalf("got != pay.VendorKey: the fake Stripe got Idempotency-Key %q; Ratchet says it stamped %q (the caller's was order-42)", got, pay.VendorKey)
	}
	// 2. Its retry: replayed from the ledger, not sent again.
	if again.Status != 200 {
		t.Fatalf("again.Status != 200: the retry was not replayed: %+v", again)
	}
	if again.Decision != "duplicate" {
		t.Fatalf("again.Decision != \"duplicate\": the retry was not replayed: %+v", again)
	}
	if again.Replayed != "true" {
		t.Fatalf("again.Replayed != \"true\": the retry was not replayed: %+v", again)
	}
	if again.Body != pay.Body {
		t.Fatalf("again.Body != pay.Body: the retry was not replayed: %+v", again)
	}
	// 3. Reported: the effect is settled in the ledger with the vendor's id.
	eff := readEffect(t, rdir, pay.EffectID)
	if eff.State != ledger.StateSucceeded {
		t.Fatalf("eff.State != ledger.StateSucceeded: the effect in the ledger: %+v", eff)
	}
	if eff.VendorReference != "pi_netns_1" {
		t.Fatalf("eff.VendorReference != \"pi_netns_1\": the effect in the ledger: %+v", eff)
	}
	if eff.Attempt != 1 {
		t.Fatalf("eff.Attempt != 1: the effect in the ledger: %+v", eff)
	}
	// 4. A host on the allow-list: spliced, so the app sees the real
	// server's certificate, not one of Ratchet's.
	allowed := res.Steps["allowed"]
	sum := sha256.Sum256(allowedLeaf.Certificate[0])
	if allowed.Status != 200 {
		t.Fatalf("allowed.Status != 200: allowed.test was not spliced untouched: %+v", allowed)
	}
	if allowed.Body != "hello from allowed.test" {
		t.Fatalf("allowed.Body != \"hello from allowed.test\": allowed.test was not spliced untouched: %+v", allowed)
	}
	if allowed.Issuer != testCAName {
		t.Fatalf("allowed.Issuer != testCAName: allowed.test was not spliced untouched: %+v", allowed)
	}
	if allowed.LeafSHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("allowed.LeafSHA256 != hex.EncodeToString(sum[:]): allowed.test was not spliced untouched: %+v", allowed)
	}
	// 5. A host not on it: refused, never dialled, logged.
	if r := res.Steps["refused"]; r.Err == "" {
		t.Fatalf("refused.test answered: %+v", r)
	}
	mu.Lock()
	if refusedConns != 0 {
		t.Fatalf("refusedConns != 0: refused.test got %d connections and plain HTTP to the vendor %d requests, want none", refusedConns, plainHits)
	}
	if plainHits != 0 {
		t.Fatalf("plainHits != 0: refused.test got %d connections and plain HTTP to the vendor %d requests, want none", refusedConns, plainHits)
	}
	mu.Unlock()
	// 6. Plain HTTP to the vendor: refused with a clear answer and log line.
	if r := res.Steps["plain"]; r.Status != 403 || !strings.Contains(r.Body, "HTTPS only") {
		t.Fatalf("plain HTTP to api.stripe.com: %+v", r)
	}
	// 7. A direct connection to the listener (its original destination is
	// the listener itself): refused.
	if r := res.Steps["direct"]; r.Err == "" {
		t.Fatalf("a direct connection to the transparent listener was served: %+v", r)
	}
	for _, want := range []string{
		`"reason":"not a vendor API host and not in proxy.allow_hosts"`, `"host":"refused.test"`,
		"plain HTTP to a vendor API host: vendors are HTTPS only",
		"its original destination is Ratchet's own transparent listener",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("Ratchet's log lacks %s:\n%s", want, logs)
		}
	}
	// 9. The loop, refused.
	if r := loop.Steps["allowed"]; r.Err == "" || !strings.Contains(logs, "a loop: this is Ratchet's own connection (UID 65532)") {
		t.Errorf("with rules excluding another UID, allowed.test gave %+v; Ratchet's log:\n%s", r, logs)
	}
	// 8. Redirected: the app's five IPv4 connections to ports 443 and 80
	// (the direct one went to loopback) and its two IPv6 ones; not
	// redirected: Ratchet's own, to the fake Stripe (one, or two if its
	// keep-alive was not reused for the second payment) and to
	// allowed.test over IPv4, to allowed6.test over IPv6.
	want := natCounters{redirected: 5, ownerExcluded: 2, redirected6: 2, ownerExcluded6: 1}
	if counters.ownerExcluded == 3 {
		want.ownerExcluded = 3
	}
	if counters != want {
		t.Fatalf("nat counters %+v, want %+v", counters, want)
	}
	// 10. IPv6 (IP6T_SO_ORIGINAL_DST, the [::1] listener): a host allowed
	// is spliced to its IPv6 destination, and a vendor host named by
	// proxy.intercept_hosts is intercepted and gated.
	if r := res.Steps["allowed6"]; r.Status != 200 || !strings.HasPrefix(r.Body, "hello from allowed6.test over ["+appIP6+"]:") || r.Issuer != testCAName {
		t.Errorf("allowed6.test over IPv6: %+v", r)
	}
	if r := res.Steps["pay6"]; r.Status != 200 || r.Decision != "execute" || r.Issuer != "Ratchet proxy CA" || r.EffectID == pay.EffectID {
		t.Errorf("a payment to stripe6.test over IPv6: %+v", r)
	}
}

// appStep is what the app saw of one request.
type appStep struct {
	Status     int
	Body       string
	Err        string
	Decision   string
	Replayed   string
	VendorKey  string
	EffectID   string
	Issuer     string // the server certificate's issuer, as the app saw it
	LeafSHA256 string
}

type appResult struct{ Steps map[string]appStep }

// appRole is the legacy app: a plain net/http client with no proxy
// settings, resolving names from /etc/hosts.
func appRole(t *testing.T) {
	dropTo(t, appUID)
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "NO_PROXY"} {
		os.Unsetenv(k)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true // one connection per request, for the counters
	hc := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	do := func(req *http.Request) appStep {
		resp, err := hc.Do(req)
		if err != nil {
			return appStep{Err: err.Error()}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		s := appStep{Status: resp.StatusCode, Body: string(b), Decision: resp.Header.Get(proxy.HeaderDecision),
			Replayed: resp.Header.Get(proxy.HeaderReplayed), VendorKey: resp.Header.Get(proxy.HeaderVendorKey), EffectID: resp.Header.Get(proxy.HeaderEffectID)}
		if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
			leaf := resp.TLS.PeerCertificates[0]
			sum := sha256.Sum256(leaf.Raw)
			s.Issuer, s.LeafSHA256 = leaf.Issuer.CommonName, hex.EncodeToString(sum[:])
		}
		return s
	}
	pay := func() *http.Request {
		req, _ := http.NewRequest("POST", "https://api.stripe.com/v1/payment_intents", strings.NewReader("amount=2000&currency=usd&customer=cus_1"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer sk_test_netns")
		req.Header.Set("Idempotency-Key", "order-42")
		return req
	}
	get := func(url string) *http.Request { req, _ := http.NewRequest("GET", url, nil); return req }
	res := appResult{Steps: map[string]appStep{}}
	if os.Getenv(netnsStepsEnv) == "loop" {
		res.Steps["allowed"] = do(get("https://allowed.test/"))
		b, _ := json.Marshal(res)
		fmt.Printf("RESULT %s\n", b)
		return
	}
	res.Steps["pay"] = do(pay())
	res.Steps["retry"] = do(pay())
	res.Steps["allowed"] = do(get("https://allowed.test/"))
	res.Steps["refused"] = do(get("https://refused.test/"))
	res.Steps["plain"] = do(get("http://api.stripe.com/v1/charges"))
	res.Steps["allowed6"] = do(get("https://allowed6.test/"))
	pay6 := pay()
	pay6.URL.Host = "stripe6.test"
	pay6.Header.Set("Idempotency-Key", "order-43")
	res.Steps["pay6"] = do(pay6)
	direct := get("https://" + transparentAt + "/v1/charges")
	direct.Host = "api.stripe.com"
	dt := tr.Clone()
	dt.TLSClientConfig = &tls.Config{ServerName: "api.stripe.com"}
	res.Steps["direct"] = func() appStep {
		resp, err := (&http.Client{Transport: dt, Timeout: 10 * time.Second}).Do(direct)
		if err != nil {
			return appStep{Err: err.Error()}
		}
		resp.Body.Close()
		return appStep{Status: resp.StatusCode}
	}()
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
}

// ratchetRoleEnv is the Ratchet helper's environment: the test CA as its
// roots (SSL_CERT_FILE), as the public roots are in production.
func ratchetRoleEnv(dir, rdir string) []string {
	return []string{"SSL_CERT_FILE=" + filepath.Join(dir, "roots.pem"), netnsDirEnv + "=" + rdir}
}

// ratchetRole is the sidecar: a proxy on a Badger ledger with the
// transparent listener, running as ratchetUID, until its stdin closes.
func ratchetRole(t *testing.T) {
	rdir := os.Getenv(netnsDirEnv)
	ln, err := net.Listen("tcp", transparentAt)
	if err != nil {
		t.Fatal(err)
	}
	ln6, err := net.Listen("tcp", "[::1]:15001") // where ip6tables sends IPv6, as serve does
	if err != nil {
		t.Fatal(err)
	}
	dropTo(t, ratchetUID)
	st, err := badgerstore.Open(filepath.Join(rdir, "ledger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := ledger.LoadOrCreateSecret(filepath.Join(rdir, "hmac.key"))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: secret, ReapInterval: -1, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := proxy.LoadOrCreateCA(filepath.Join(rdir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	// The default upstream: the real name, which this pod's /etc/hosts
	// sends to the fake.
	p, err := proxy.New(eng, proxy.Options{Upstreams: map[string]string{"stripe": "https://api.stripe.com"},
		AllowHosts: []string{"allowed.test", "allowed6.test"}, InterceptHosts: map[string][]string{"stripe": {"stripe6.test"}},
		CA: ca, UpstreamTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	tp := p.Transparent()
	go tp.Serve(ln)
	go tp.Serve(ln6)
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tp.Shutdown(ctx)
	if err := eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// readEffect opens the ledger the Ratchet helper left and reads one effect.
func readEffect(t *testing.T, rdir, id string) *ledger.Effect {
	t.Helper()
	st, err := badgerstore.Open(filepath.Join(rdir, "ledger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := ledger.LoadOrCreateSecret(filepath.Join(rdir, "hmac.key"))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: secret, ReapInterval: -1, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	eff, err := eng.Get(context.Background(), ledger.DefaultNamespace, id, "")
	if err != nil {
		t.Fatalf("effect %q: %v", id, err)
	}
	return eff
}

// dropTo makes a helper process run as uid (and gid uid), as its
// container would.
func dropTo(t *testing.T, uid int) {
	t.Helper()
	if err := syscall.Setgroups(nil); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgid(uid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(uid); err != nil {
		t.Fatal(err)
	}
}

// topology is the two namespaces and the veth pair between them.
type topology struct {
	app, net string // namespace names
	dir      string
}

// newTopology builds the namespaces, or skips when the machine cannot
// (unless RATCHET_REQUIRE_NETNS says it must). Everything it makes is
// removed when the test ends, however it ends.
func newTopology(t *testing.T) *topology {
	t.Helper()
	skip := func(why string) {
		if os.Getenv("RATCHET_REQUIRE_NETNS") != "" {
			t.Fatalf("RATCHET_REQUIRE_NETNS is set and %s", why)
		}
		suites.Skipped(suites.Netns, "needs root, ip and iptables: "+why)
		t.Skipf("transparent mode's netns test needs root, ip and iptables (the machine cannot create network namespaces): %s", why)
	}
	if os.Geteuid() != 0 {
		skip("not running as root")
	}
	for _, bin := range []string{"ip", "iptables", "ip6tables"} {
		if _, err := exec.LookPath(bin); err != nil {
			skip(bin + " is not installed")
		}
	}
	id := strconv.Itoa(os.Getpid() % 100000)
	topo := &topology{app: "rtapp" + id, net: "rtnet" + id, dir: t.TempDir()}
	// The helpers drop root: they must reach their files.
	for _, d := range []string{filepath.Dir(topo.dir), topo.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("ip", "netns", "add", topo.app).CombinedOutput(); err != nil {
		skip("ip netns add: " + strings.TrimSpace(string(out)))
	}
	hostsDir := filepath.Join("/etc/netns", topo.app)
	_, statErr := os.Stat("/etc/netns")
	t.Cleanup(func() {
		if os.IsNotExist(statErr) {
			defer os.Remove("/etc/netns") // made for this test (only if still empty)
		}
		// Deleting a namespace deletes its end of the veth (and so the
		// pair) and its iptables rules.
		exec.Command("ip", "netns", "del", topo.app).Run()
		exec.Command("ip", "netns", "del", topo.net).Run()
		os.RemoveAll(hostsDir)
	})
	vApp, vNet := "rtv"+id+"a", "rtv"+id+"n"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", topo.net)
	run("ip", "link", "add", vApp, "type", "veth", "peer", "name", vNet)
	run("ip", "link", "set", vApp, "netns", topo.app)
	run("ip", "link", "set", vNet, "netns", topo.net)
	run("ip", "-n", topo.app, "addr", "add", "198.18.7.1/24", "dev", vApp)
	run("ip", "-n", topo.app, "-6", "addr", "add", appIP6+"/64", "dev", vApp, "nodad")
	for _, ip := range []string{stripeIP, allowedIP, refusedIP} {
		run("ip", "-n", topo.net, "addr", "add", ip+"/24", "dev", vNet)
	}
	for _, ip := range []string{stripe6IP, allowed6IP} {
		run("ip", "-n", topo.net, "-6", "addr", "add", ip+"/64", "dev", vNet, "nodad")
	}
	for _, ns := range [][2]string{{topo.app, vApp}, {topo.net, vNet}} {
		run("ip", "-n", ns[0], "link", "set", "lo", "up")
		run("ip", "-n", ns[0], "link", "set", ns[1], "up")
	}
	// The pod's DNS: ip netns exec mounts this over /etc/hosts.
	if err := os.MkdirAll(hostsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(hostsDir, "hosts"), []byte("127.0.0.1 localhost\n::1 localhost\n"+
		stripeIP+" api.stripe.com\n"+allowedIP+" allowed.test\n"+refusedIP+" refused.test\n"+
		stripe6IP+" stripe6.test\n"+allowed6IP+" allowed6.test\n"), 0o644)
	suites.Ran(suites.Netns)
	return topo
}

// inApp runs a command in the app namespace and returns its output.
func (topo *topology) inApp(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", topo.app}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// applyRules runs the rules in the app namespace as `ratchet transparent
// rules --apply` does.
func (topo *topology) applyRules(t *testing.T, cmds []proxy.Command) {
	t.Helper()
	for _, c := range cmds {
		if c.Unless != nil && exec.Command("ip", append([]string{"netns", "exec", topo.app}, c.Unless...)...).Run() == nil {
			continue
		}
		out, err := exec.Command("ip", append([]string{"netns", "exec", topo.app}, c.Args...)...).CombinedOutput()
		if err != nil && !c.MayFail {
			t.Fatalf("%s: %v: %s", strings.Join(c.Args, " "), err, out)
		}
	}
}

type natCounters struct{ redirected, ownerExcluded, redirected6, ownerExcluded6 int }

// counters reads how many connections the rules redirected and how many
// of Ratchet's own they let through, per family (the nat table sees each
// connection's first packet only).
func (topo *topology) counters(t *testing.T) natCounters {
	t.Helper()
	var c natCounters
	for _, fam := range []struct {
		cmd                   string
		redirected, ownerLeft *int
	}{{"iptables", &c.redirected, &c.ownerExcluded}, {"ip6tables", &c.redirected6, &c.ownerExcluded6}} {
		out := topo.inApp(t, fam.cmd, "-w", "-t", "nat", "-L", proxy.RulesChain, "-v", "-x", "-n")
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) < 3 {
				continue
			}
			n, err := strconv.Atoi(f[0])
			if err != nil {
				continue
			}
			switch {
			case f[2] == "REDIRECT":
				*fam.redirected += n
			case strings.Contains(l, "owner UID match "+strconv.Itoa(ratchetUID)):
				*fam.ownerLeft += n
			}
		}
	}
	return c
}

// role is a helper process: this test binary, in the app namespace.
type role struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited, with err set
	err    error
}

func startRole(t *testing.T, topo *topology, name string, env []string) *role {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", topo.app, exe, "-test.run=^TestTransparentNetns$", "-test.count=1")
	cmd.Env = append(cleanEnv(), append(env, netnsRoleEnv+"="+name)...)
	r := &role{cmd: cmd, lines: make(chan string, 16), stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = r.stderr
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
		r.err = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		r.stdin.Close()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("%s helper's stderr:\n%s", name, r.stderr.String())
		}
	})
	return r
}

// waitFor returns the first line of the helper's output that starts with
// prefix.
func (r *role) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("the helper ended before printing %q:\n%s", prefix, r.stderr.String())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q from the helper within a minute:\n%s", prefix, r.stderr.String())
		}
	}
}

// wait waits for the helper to exit, and fails when it failed.
func (r *role) wait(t *testing.T) {
	t.Helper()
	for range r.lines {
	}
	<-r.done
	if r.err != nil {
		t.Fatalf("helper: %v\n%s", r.err, r.stderr.String())
	}
}

// stop closes the helper's stdin (Ratchet then shuts down) and waits.
func (r *role) stop(t *testing.T) {
	t.Helper()
	r.stdin.Close()
	r.wait(t)
}

// cleanEnv is this process's environment without proxy settings.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR", netnsRoleEnv, netnsStepsEnv:
			continue
		}
		out = append(out, kv)
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// listenIn opens a listener inside network namespace ns: on a thread of
// its own, moved into ns and never moved back (the runtime ends a thread
// still locked when its goroutine returns). The socket stays in ns.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.ln.Close() })
	return r.ln
}

// serveTLSIn serves h over TLS with cert at addr inside ns.
func serveTLSIn(t *testing.T, ns, addr string, cert tls.Certificate, h http.Handler) *http.Server {
	t.Helper()
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	ln := tls.NewListener(listenIn(t, ns, addr), srv.TLSConfig)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// testCA is a CA of the test's own, standing for the public roots.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: testCAName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) leaf(t *testing.T, host string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writeFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

// chownAll gives dir and everything in it to uid.
func chownAll(t *testing.T, dir string, uid int) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}
