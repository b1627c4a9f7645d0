package kubernetes_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/internal/loopback"
)

// The image names the manifests, the Dockerfile and the release workflow
// share, without the registry (each deployment has its own).
const (
	sidecarImage = "ratchet-mcp/ratchet"
	initImage    = "ratchet-mcp/ratchet-init"
)

// dockerfile is what the manifests depend on in ../../Dockerfile.
type dockerfile struct {
	stages  []string // in order; the last is what a plain build makes
	uid     int      // the USER of the ratchet stage
	initUID int      // the --uid of the ratchet-init stage's CMD
}

var (
	fromRe = regexp.MustCompile(`(?i)^FROM\s+.*\s+AS\s+(\S+)$`)
	userRe = regexp.MustCompile(`(?i)^USER\s+(\d+)(?::(\d+))?$`)
	uidArg = regexp.MustCompile(`"--uid",\s*"(\d+)"`)
)

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := dockerfile{uid: -1, initUID: -1}
	stage := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if m := fromRe.FindStringSubmatch(l); m != nil {
			stage = m[1]
			d.stages = append(d.stages, stage)
		}
		if m := userRe.FindStringSubmatch(l); m != nil && stage == "ratchet" {
			d.uid, _ = strconv.Atoi(m[1])
			if m[2] != m[1] {
				t.Errorf("the ratchet stage runs as %s, group %q: one UID and its own group", m[1], m[2])
			}
		}
		if m := uidArg.FindStringSubmatch(l); m != nil && stage == "ratchet-init" {
			d.initUID, _ = strconv.Atoi(m[1])
		}
	}
	return d
}

func readDocs(t *testing.T, file string) map[string]obj {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]obj{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d obj
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		docs[str(d["kind"])+"/"+str(get(d, "metadata", "name"))] = d
	}
	return docs
}

// runAs is the UID a container runs as: its own runAsUser, else the pod's,
// else the image's (-1 when neither says).
func runAs(pod, container obj, imageUID int) int {
	for _, v := range []any{get(container, "securityContext", "runAsUser"), get(pod, "securityContext", "runAsUser")} {
		if n, ok := v.(int); ok {
			return n
		}
	}
	return imageUID
}

// imagePath is an image reference without its registry and tag.
func imagePath(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	parts := strings.Split(ref, "/")
	if len(parts) > 2 { // a registry host first
		parts = parts[len(parts)-2:]
	}
	return strings.Join(parts, "/")
}

func argAfter(args []any, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return str(args[i+1])
		}
	}
	return ""
}

// TestDockerfileAndManifestsAgree: the UID the image runs as is the one
// the manifests run Ratchet as and the one transparent mode's rules
// exclude; otherwise Ratchet's own calls to the vendors would be
// redirected back to it.
func TestDockerfileAndManifestsAgree(t *testing.T) {
	d := readDockerfile(t)
	if len(d.stages) == 0 || d.stages[len(d.stages)-1] != "ratchet" || !slices.Contains(d.stages, "ratchet-init") {
		t.Fatalf("Dockerfile stages %v: want ratchet-init, and ratchet last (the default target)", d.stages)
	}
	if d.uid <= 0 {
		t.Fatal("the Dockerfile's ratchet stage must run as a non-root numeric USER")
	}
	if d.initUID != d.uid {
		t.Errorf("the ratchet-init image's default rules exclude UID %d, the sidecar image runs as %d", d.initUID, d.uid)
	}
	for _, file := range []string{"ratchet-sidecar.yaml", "ratchet-transparent.yaml", "ratchet-workload-identity.yaml"} {
		t.Run(file, func(t *testing.T) {
			for name, doc := range readDocs(t, file) {
				if !strings.HasPrefix(name, "Deployment/") {
					continue
				}
				pod := get(doc, "spec", "template", "spec").(obj)
				rc := named(list(pod["initContainers"]), "ratchet")
				if rc == nil || imagePath(str(rc["image"])) != sidecarImage {
					t.Fatalf("%s: no ratchet sidecar running the image %s", name, sidecarImage)
				}
				if uid := runAs(pod, rc, d.uid); uid != d.uid {
					t.Errorf("%s: ratchet runs as UID %d, the Dockerfile's is %d", name, uid, d.uid)
				}
			}
		})
	}
}

func TestTransparentManifests(t *testing.T) {
	d := readDockerfile(t)
	docs := readDocs(t, "ratchet-transparent.yaml")
	cm, dep := docs["ConfigMap/ratchet-config"], docs["Deployment/legacy-checkout"]
	if cm == nil || dep == nil || docs["Secret/ratchet-secrets"] == nil || docs["PersistentVolumeClaim/ratchet-ledger"] == nil {
		t.Fatalf("missing documents: %v", docs)
	}
	pod := get(dep, "spec", "template", "spec").(obj)
	inits := list(pod["initContainers"])
	rules, rc := named(inits, "ratchet-rules"), named(inits, "ratchet")
	app := named(list(pod["containers"]), "app")
	if rules == nil || rc == nil || app == nil || rc["restartPolicy"] != "Always" {
		t.Fatal("want init containers ratchet-rules and ratchet (a native sidecar) and the container app")
	}
	if slices.IndexFunc(inits, func(c any) bool { return c.(obj)["name"] == "ratchet-rules" }) != 0 {
		t.Error("the rules must be applied first, before anything in the pod reaches out")
	}

	// The config, with its token placeholders filled in as in the sidecar
	// test, is valid and turns transparent mode on, on loopback.
	raw := str(get(cm, "data", "ratchet.yaml"))
	filled := agentPlaceholderRe.ReplaceAllString(raw, "token_sha256: "+sha(randomToken(t)))
	filled = adminPlaceholderRe.ReplaceAllString(filled, "token_sha256: "+sha(randomToken(t)))
	cfg, err := config.Parse(strings.NewReader(filled), "configmap ratchet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen.Transparent == "" || !loopback.Is(cfg.Listen.Transparent) {
		t.Fatalf("listen.transparent %q", cfg.Listen.Transparent)
	}

	// The rules: applied by the init image as root with NET_ADMIN, to the
	// listener's port, excluding the UID Ratchet runs as.
	args := list(rules["args"])
	if imagePath(str(rules["image"])) != initImage || !slices.Equal(args[:2], []any{"transparent", "rules"}) || !slices.Contains(args, "--apply") {
		t.Fatalf("ratchet-rules: %v %v", rules["image"], args)
	}
	if !slices.Contains(list(get(rules, "securityContext", "capabilities", "add")), "NET_ADMIN") || runAs(pod, rules, -1) != 0 {
		t.Error("ratchet-rules needs root and NET_ADMIN")
	}
	ratchetUID := runAs(pod, rc, d.uid)
	if argAfter(args, "--uid") != strconv.Itoa(ratchetUID) || ratchetUID != d.uid {
		t.Errorf("the rules exclude UID %s, Ratchet runs as %d, the image as %d", argAfter(args, "--uid"), ratchetUID, d.uid)
	}
	if argAfter(args, "--listen-port") != port(t, cfg.Listen.Transparent) {
		t.Errorf("the rules redirect to port %s, listen.transparent is %s", argAfter(args, "--listen-port"), cfg.Listen.Transparent)
	}
	if !strings.Contains(","+argAfter(args, "--ports")+",", ",443,") {
		t.Error("the rules must redirect 443")
	}

	// The app: not Ratchet's UID (or nothing of it would be redirected),
	// no proxy settings, and it trusts the CA Ratchet exports.
	if uid := runAs(pod, app, -1); uid == ratchetUID || uid <= 0 {
		t.Errorf("the app runs as UID %d: it must be non-root and not %d, whose connections the rules let through", uid, ratchetUID)
	}
	for _, e := range list(app["env"]) {
		if n := strings.ToUpper(str(get(e, "name"))); strings.HasSuffix(n, "_PROXY") {
			t.Errorf("the app has %s: transparent mode needs no proxy settings", n)
		}
	}
	caVol := mountOf(t, rc, cfg.Proxy.CAExportPath)
	if mountOf(t, app, cfg.Proxy.CAExportPath) != caVol || get(named(list(pod["volumes"]), caVol), "emptyDir") == nil {
		t.Error("the CA must be exported to an emptyDir the app mounts")
	}
	if !strings.Contains(str(get(envOf(app, "SSL_CERT_DIR"), "value")), "/var/run/ratchet-ca") ||
		str(get(envOf(app, "NODE_EXTRA_CA_CERTS"), "value")) != cfg.Proxy.CAExportPath {
		t.Error("the app does not trust the exported CA")
	}

	// The release workflow builds both images from the Dockerfile's stages.
	wf, err := os.ReadFile("../../.github/workflows/release.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"target: ratchet\n", "target: ratchet-init\n", "/" + sidecarImage + ":", "/" + initImage + ":"} {
		if !strings.Contains(string(wf), want) {
			t.Errorf("the release workflow lacks %q", want)
		}
	}
}
