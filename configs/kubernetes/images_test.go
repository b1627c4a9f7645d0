package kubernetes_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// releaseTagRe is the form of a release's git tag, which the release
// workflow pushes as the images' tag (on: push: tags: v*).
var releaseTagRe = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

// Both manifests run one image name each for the sidecar and the init
// container, at one version tag of the form a release pushes (never
// :latest, which changes under a running pod), and the release workflow
// pushes exactly those names with that tag form.
func TestImagesAreTheOnesTheReleasePushes(t *testing.T) {
	tags := map[string]bool{}
	for _, file := range []string{"ratchet-sidecar.yaml", "ratchet-transparent.yaml", "ratchet-workload-identity.yaml"} {
		for name, doc := range readDocs(t, file) {
			pod := get(doc, "spec", "template", "spec")
			for _, c := range append(list(get(pod, "initContainers")), list(get(pod, "containers"))...) {
				ref := str(get(c, "image"))
				p := imagePath(ref)
				if p != sidecarImage && p != initImage {
					continue // the app's own image
				}
				repo, tag, _ := strings.Cut(ref, ":")
				if repo != p {
					t.Errorf("%s %s: image %q names a registry; the manifests name %s without one, as the release workflow documents", file, name, ref, p)
				}
				if !releaseTagRe.MatchString(tag) {
					t.Errorf("%s %s: image %q: the tag must be a release's version (vX.Y.Z), not %q", file, name, ref, tag)
				}
				tags[tag] = true
			}
		}
	}
	if len(tags) != 1 {
		t.Errorf("the manifests name the images at tags %v: want one version", tags)
	}

	b, err := os.ReadFile("../../.github/workflows/release.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf obj
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(list(get(wf, "on", "push", "tags")), any("v*")) {
		t.Errorf("the release workflow does not run on a v* tag: on.push.tags is %v", get(wf, "on", "push", "tags"))
	}
	if v := str(get(wf, "jobs", "images", "env", "VERSION")); !strings.Contains(v, "github.ref_name") {
		t.Errorf("the images' VERSION %q is not the git tag (github.ref_name)", v)
	}
	var pushed []string
	for _, step := range list(get(wf, "jobs", "images", "steps")) {
		for _, line := range strings.Split(strings.TrimSpace(str(get(step, "with", "tags"))), "\n") {
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			name, ok := strings.CutPrefix(line, "${{ vars.IMAGE_REGISTRY }}/")
			if !ok || !strings.HasSuffix(name, ":${{ env.VERSION }}") {
				t.Errorf("the workflow pushes %q: want ${{ vars.IMAGE_REGISTRY }}/NAME:${{ env.VERSION }} only", line)
				continue
			}
			pushed = append(pushed, strings.TrimSuffix(name, ":${{ env.VERSION }}"))
		}
	}
	slices.Sort(pushed)
	if want := []string{sidecarImage, initImage}; !slices.Equal(pushed, want) {
		t.Errorf("the workflow pushes %v, the manifests run %v", pushed, want)
	}
}

// The build context leaves out the Node.js suites' packages (tens of MB).
func TestDockerignoreLeavesOutNodeModules(t *testing.T) {
	b, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for _, want := range []string{"/interop/node_modules/", "/console/browser/node_modules/"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}
