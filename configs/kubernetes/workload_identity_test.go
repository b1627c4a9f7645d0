package kubernetes_test

import (
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/internal/config"
)

// TestWorkloadIdentityManifestsHoldNoAgentSecret: the variant in which the
// agent authenticates with its projected service account token. No Secret
// and no secretKeyRef anywhere; the pod mounts no default token; the
// agent's projected token has the audience the config's Kubernetes issuer
// accepts, in the file RATCHET_TOKEN_FILE names; Ratchet reads the
// cluster's keys with a token and CA of its own, mounted where the config
// says and not into the agent; the config is valid once the admin's hash
// is filled in (and refused on its placeholder until then).
func TestWorkloadIdentityManifestsHoldNoAgentSecret(t *testing.T) {
	docs := readDocs(t, "ratchet-workload-identity.yaml")
	var kinds []string
	for k := range docs {
		kinds = append(kinds, strings.Split(k, "/")[0])
	}
	for _, k := range kinds {
		if k == "Secret" {
			t.Errorf("the manifests hold a Secret: %v", kinds)
		}
	}
	cm, dep := docs["ConfigMap/ratchet-config"], docs["Deployment/checkout-agent"]
	if cm == nil || dep == nil || docs["ServiceAccount/checkout-agent"] == nil {
		t.Fatalf("missing documents: %v", kinds)
	}
	spec := get(dep, "spec", "template", "spec")
	if get(spec, "automountServiceAccountToken") != false || get(spec, "serviceAccountName") != "checkout-agent" {
		t.Error("the pod must run as checkout-agent and mount no default token (the agent would read Ratchet's)")
	}
	volumes := list(get(spec, "volumes"))
	rc := named(list(get(spec, "initContainers")), "ratchet")
	app := named(list(get(spec, "containers")), "agent")
	for _, c := range []obj{rc, app} {
		for _, e := range list(c["env"]) {
			if get(e, "valueFrom", "secretKeyRef") != nil {
				t.Errorf("container %s reads a Secret: %v", c["name"], e)
			}
		}
	}

	raw := str(get(cm, "data", "ratchet.yaml"))
	_, err := config.Parse(strings.NewReader(raw), "configmap ratchet.yaml")
	var ce *config.Error
	if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Path != "auth.admins[0].token_sha256" {
		t.Fatalf("the embedded config as shipped must fail on its admin placeholder only: %v", err)
	}
	cfg, err := config.Parse(strings.NewReader(adminPlaceholderRe.ReplaceAllString(raw, "token_sha256: "+sha(randomToken(t)))), "configmap ratchet.yaml")
	if err != nil {
		t.Fatalf("embedded config with the admin's hash filled in: %v", err)
	}
	if len(cfg.Auth.Agents) != 0 || cfg.Auth.OAuth == nil || len(cfg.Auth.OAuth.Issuers) != 1 || !cfg.Auth.OAuth.Issuers[0].Kubernetes {
		t.Fatalf("the config must list no agent token and one Kubernetes issuer: %+v", cfg.Auth)
	}
	is := cfg.Auth.OAuth.Issuers[0]

	// The agent's token: projected for the issuer's audience, where
	// RATCHET_TOKEN_FILE points.
	tokenFile := str(get(envOf(app, "RATCHET_TOKEN_FILE"), "value"))
	vol := named(volumes, mountOf(t, app, tokenFile))
	src := get(list(get(vol, "projected", "sources"))[0], "serviceAccountToken")
	if diff := cmp.Diff([]string{str(get(src, "audience")), path.Base(tokenFile)}, []string{is.Audiences[0], str(get(src, "path"))}); diff != "" {
		t.Errorf("the agent's projected token (audience, file) (-manifest +config):\n%s", diff)
	}
	// Ratchet's own token and CA, for the keys, in a volume the agent
	// does not mount.
	own := mountOf(t, rc, is.BearerTokenFile)
	if mountOf(t, rc, is.CAFile) != own {
		t.Error("bearer_token_file and ca_file must come from Ratchet's projected volume")
	}
	for _, m := range list(app["volumeMounts"]) {
		if str(get(m, "name")) == own {
			t.Errorf("the agent mounts Ratchet's own token volume %s", own)
		}
	}
	var sawToken, sawCA bool
	for _, s := range list(get(named(volumes, own), "projected", "sources")) {
		if tok := get(s, "serviceAccountToken"); tok != nil && str(get(tok, "path")) == path.Base(is.BearerTokenFile) && get(tok, "audience") == nil {
			sawToken = true
		}
		if get(s, "configMap", "name") == "kube-root-ca.crt" {
			sawCA = true
		}
	}
	if !sawToken || !sawCA {
		t.Errorf("Ratchet's volume must project an API server token (%v) and kube-root-ca.crt (%v)", sawToken, sawCA)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("embedded config warns: %+v", w)
	}
}
