// Package kubernetes_test checks that the example Kubernetes manifests are
// consistent: every volume, Secret key, ConfigMap key, port and path they
// refer to exists, and the embedded Ratchet config is valid once its token
// placeholders are filled in (and refused until then).
package kubernetes_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/internal/loopback"
)

type obj = map[string]any

func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }
func str(v any) string { s, _ := v.(string); return s }

func named(items []any, name string) obj {
	for _, it := range items {
		if m, ok := it.(obj); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

// mountOf returns the volume mounted at the directory holding p.
func mountOf(t *testing.T, container obj, p string) string {
	t.Helper()
	for _, m := range list(container["volumeMounts"]) {
		mp := str(get(m, "mountPath"))
		if p == mp || strings.HasPrefix(p, mp+"/") {
			return str(get(m, "name"))
		}
	}
	t.Fatalf("container %s mounts nothing at %s", container["name"], p)
	return ""
}

func envOf(container obj, name string) obj { return named(list(container["env"]), name) }

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mib reads a MiB or Mi quantity ("400MiB", "512Mi").
func mib(t *testing.T, q string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSuffix(q, "B"), "Mi"))
	if err != nil || !strings.HasSuffix(strings.TrimSuffix(q, "B"), "Mi") {
		t.Fatalf("%q is not a quantity in Mi", q)
	}
	return n
}

func TestSidecarManifests(t *testing.T) {
	docs := readDocs(t, "ratchet-sidecar.yaml")
	secret, cm, pvc := docs["Secret/ratchet-secrets"], docs["ConfigMap/ratchet-config"], docs["PersistentVolumeClaim/ratchet-ledger"]
	dep := docs["Deployment/checkout-agent"]
	if secret == nil || cm == nil || pvc == nil || dep == nil {
		t.Fatalf("missing documents: %v", docs)
	}
	spec := get(dep, "spec", "template", "spec")
	volumes := list(get(spec, "volumes"))
	rc := named(list(get(spec, "initContainers")), "ratchet")
	app := named(list(get(spec, "containers")), "agent")
	if rc == nil || app == nil || rc["restartPolicy"] != "Always" {
		t.Fatalf("ratchet must be a native sidecar (init container, restartPolicy Always): %v", rc)
	}
	if get(dep, "spec", "replicas") != 1 || get(dep, "spec", "strategy", "type") != "Recreate" {
		t.Fatal("a Badger ledger on one PVC allows one replica, replaced with Recreate")
	}

	// The Go runtime's soft limit sits below the container's hard one, so
	// the collector works harder before the kernel kills the sidecar.
	soft, hard := str(get(envOf(rc, "GOMEMLIMIT"), "value")), str(get(rc, "resources", "limits", "memory"))
	if mib(t, soft) <= 0 || mib(t, soft) >= mib(t, hard) {
		t.Fatalf("GOMEMLIMIT %q must be set below the memory limit %q", soft, hard)
	}

	// The config: mounted from the ConfigMap, and valid.
	args := list(rc["args"])
	cfgPath := ""
	for i, a := range args {
		if a == "--config" {
			cfgPath = str(args[i+1])
		}
	}
	vol := named(volumes, mountOf(t, rc, cfgPath))
	if str(get(vol, "configMap", "name")) != "ratchet-config" {
		t.Fatalf("config volume %v", vol)
	}
	raw := str(get(cm, "data", path.Base(cfgPath)))
	// As shipped, the token hashes are placeholders that refuse to start,
	// each saying how to make the real one; nothing else is wrong.
	_, err := config.Parse(strings.NewReader(raw), "configmap ratchet.yaml")
	var ce *config.Error
	if !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Fatalf("the embedded config as shipped must fail on its two token placeholders: %v", err)
	}
	for _, p := range ce.Problems {
		if !strings.HasSuffix(p.Path, ".token_sha256") || !strings.Contains(p.Message, "ratchet token hash < token-file") {
			t.Errorf("placeholder problem %+v", p)
		}
	}
	// Filled in as an operator would: the agent's entry is the hash of the
	// Secret's agent-token (which the app sends as RATCHET_TOKEN), the
	// admin's that of a token kept outside the pod.
	agentToken, adminToken := randomToken(t), randomToken(t)
	secret["stringData"].(obj)["agent-token"] = agentToken
	filled := agentPlaceholderRe.ReplaceAllString(raw, "token_sha256: "+sha(agentToken))
	filled = adminPlaceholderRe.ReplaceAllString(filled, "token_sha256: "+sha(adminToken))
	cfg, err := config.Parse(strings.NewReader(filled), "configmap ratchet.yaml")
	if err != nil {
		t.Fatalf("embedded config with its tokens filled in: %v", err)
	}
	// Its rules govern the proxied SDK calls as they do the agent's
	// begins: config validate has nothing to warn of.
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("embedded config warns: %+v", w)
	}

	// Ports and probes line up with the config's listeners.
	ports := map[string]string{}
	for _, p := range list(rc["ports"]) {
		ports[str(get(p, "name"))] = strings.TrimSpace(yamlString(get(p, "containerPort")))
	}
	for name, addr := range map[string]string{"mcp": cfg.Listen.MCP, "admin": cfg.Listen.Admin, "proxy": cfg.Listen.Proxy} {
		if ports[name] != port(t, addr) {
			t.Errorf("port %s: container %s, config %s", name, ports[name], addr)
		}
	}
	for probe, want := range map[string]string{"startupProbe": "/readyz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if get(rc, probe, "httpGet", "path") != want || get(rc, probe, "httpGet", "port") != "admin" {
			t.Errorf("%s: %v", probe, rc[probe])
		}
	}
	// A listener beyond loopback needs tokens, or serve refuses to start.
	if !loopback.Is(cfg.Listen.Admin) && len(cfg.Auth.Admins) == 0 {
		t.Error("admin listens beyond loopback without auth.admins")
	}
	if !loopback.Is(cfg.Listen.MCP) && len(cfg.Auth.Agents) == 0 {
		t.Error("MCP listens beyond loopback without auth.agents")
	}

	// Secrets: the HMAC key file is a key of the mounted Secret.
	vol = named(volumes, mountOf(t, rc, cfg.HMACKeyPath()))
	if str(get(vol, "secret", "secretName")) != "ratchet-secrets" || get(secret, "stringData", path.Base(cfg.HMACKeyPath())) == nil {
		t.Fatalf("hmac key volume %v", vol)
	}
	// The ledger is on the PVC.
	vol = named(volumes, mountOf(t, rc, cfg.DataDir))
	if str(get(vol, "persistentVolumeClaim", "claimName")) != "ratchet-ledger" {
		t.Fatalf("ledger volume %v", vol)
	}
	// The app goes through the proxy and trusts the CA Ratchet exports.
	if v := str(get(envOf(app, "HTTPS_PROXY"), "value")); !strings.HasSuffix(v, ":"+port(t, cfg.Listen.Proxy)) {
		t.Errorf("HTTPS_PROXY %q", v)
	}
	if v := str(get(envOf(app, "RATCHET_MCP_URL"), "value")); !strings.Contains(v, ":"+port(t, cfg.Listen.MCP)+"/mcp") {
		t.Errorf("RATCHET_MCP_URL %q", v)
	}
	caVol := mountOf(t, rc, cfg.Proxy.CAExportPath)
	if mountOf(t, app, cfg.Proxy.CAExportPath) != caVol || get(named(volumes, caVol), "emptyDir") == nil {
		t.Error("the CA must be exported to an emptyDir the app mounts")
	}
	if !strings.Contains(str(get(envOf(app, "SSL_CERT_DIR"), "value")), path.Dir(cfg.Proxy.CAExportPath)) ||
		str(get(envOf(app, "NODE_EXTRA_CA_CERTS"), "value")) != cfg.Proxy.CAExportPath {
		t.Error("the app does not trust the exported CA")
	}
	ref := get(envOf(app, "RATCHET_TOKEN"), "valueFrom", "secretKeyRef")
	if str(get(ref, "name")) != "ratchet-secrets" || get(secret, "stringData", str(get(ref, "key"))) == nil {
		t.Errorf("agent token ref %v", ref)
	}
	// The token the app sends is an agent's, in the proxy's namespace, and
	// not an admin's.
	appToken := str(get(secret, "stringData", str(get(ref, "key"))))
	var agent *config.Agent
	for i, a := range cfg.Auth.Agents {
		if a.TokenSHA256 == sha(appToken) {
			agent = &cfg.Auth.Agents[i]
		}
	}
	if agent == nil || agent.Namespace != cfg.Proxy.Namespace {
		t.Errorf("the app's token is no agent of namespace %s: %+v", cfg.Proxy.Namespace, cfg.Auth.Agents)
	}
	for _, a := range cfg.Auth.Admins {
		if a.TokenSHA256 == sha(appToken) {
			t.Error("the app's token is an admin's")
		}
	}
}

// The placeholders of the embedded config's token hashes.
var (
	agentPlaceholderRe = regexp.MustCompile(`token_sha256: "REPLACE[^"]*agent-token[^"]*"`)
	adminPlaceholderRe = regexp.MustCompile(`token_sha256: "REPLACE[^"]*admin token[^"]*"`)
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func yamlString(v any) string {
	b, _ := yaml.Marshal(v)
	return string(b)
}
