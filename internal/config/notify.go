package config

import (
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/ratchet-mcp/ratchet/internal/loopback"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// Notify is the notify block: where the ledger's notification events go
// (package notify). Secrets come from files or environment variables,
// never from the file itself.
type Notify struct {
	Sinks  []NotifySink  `yaml:"sinks"`
	Routes []NotifyRoute `yaml:"routes"`
	// MaxAttempts is the tries before an event is a dead letter
	// (default 10).
	MaxAttempts int `yaml:"max_attempts"`
	// MaxBackoff caps the wait between tries, which doubles from one
	// second (default 10m).
	MaxBackoff Duration `yaml:"max_backoff"`
	// MaxWaiting bounds each sink's undelivered entries (default 10,000):
	// past it the oldest become dead letters. MaxDeadLetters bounds each
	// sink's dead letters (default 1,000): past it the oldest are dropped,
	// counted (ratchet_outbox_dropped_total) and reported (outbox.dropped).
	// No decision is ever refused for either.
	MaxWaiting     int `yaml:"max_waiting"`
	MaxDeadLetters int `yaml:"max_dead_letters"`
	// BudgetThresholds are the fractions of a ceiling whose crossing is a
	// budget.threshold event, e.g. [0.5, 0.8, 1.0]; none: no alerts.
	BudgetThresholds []float64 `yaml:"budget_thresholds"`
	// ConsoleURL is the console's address as the people notified reach it
	// (e.g. https://ratchet.example.com through an ingress): Teams cards'
	// buttons and mails link an approval's page under it, PagerDuty alerts
	// an effect's; MCP approval_required answers carry the approval's page
	// (approval_url). Required with a teams or email sink.
	ConsoleURL string `yaml:"console_url"`
}

// NotifySink is one destination.
type NotifySink struct {
	// Name is how routes name it. Required.
	Name string `yaml:"name"`
	// Type is webhook, slack, pagerduty, teams or email.
	Type string `yaml:"type"`
	// URL (webhook) receives the events.
	URL string `yaml:"url"`
	// SecretFile or SecretEnv (webhook) holds the signing secret.
	SecretFile string `yaml:"secret_file"`
	SecretEnv  string `yaml:"secret_env"`
	// Channel (slack) is the channel id messages go to.
	Channel string `yaml:"channel"`
	// TokenFile or TokenEnv (slack) holds the bot token (xoxb-…).
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
	// SigningSecretFile or SigningSecretEnv (slack) holds the app's
	// signing secret, which verifies button clicks.
	SigningSecretFile string `yaml:"signing_secret_file"`
	SigningSecretEnv  string `yaml:"signing_secret_env"`
	// Deciders (slack) are the Slack user ids who may approve or reject;
	// none (and no decider_groups): the buttons decide nothing.
	Deciders []string `yaml:"deciders"`
	// DeciderGroups (slack) are Slack user group ids (S…) whose members
	// may decide too (the bot needs the usergroups:read scope).
	DeciderGroups []string `yaml:"decider_groups"`
	// Listen (slack) is where the interactivity endpoint listens (its path
	// is /slack/interactivity); required with deciders.
	Listen string `yaml:"listen"`
	// APIURL (slack) is the Web API's base URL; empty means Slack's own.
	APIURL string `yaml:"api_url"`

	// RoutingKeyFile or RoutingKeyEnv (pagerduty) holds the integration
	// key of an Events API v2 integration; URL (pagerduty, optional) is
	// the Events API endpoint (e.g. the EU region's), Source its
	// payload.source (default ratchet).
	RoutingKeyFile string `yaml:"routing_key_file"`
	RoutingKeyEnv  string `yaml:"routing_key_env"`
	Source         string `yaml:"source"`
	// URLFile or URLEnv (teams) holds the Workflows webhook's URL, a
	// secret: its sig parameter lets anyone post to the channel.
	URLFile string `yaml:"url_file"`
	URLEnv  string `yaml:"url_env"`
	// Address (email) is the SMTP server's host:port (submission, 587);
	// From the sender, To the recipients.
	Address string   `yaml:"address"`
	From    string   `yaml:"from"`
	To      []string `yaml:"to"`
	// Username (email, optional) authenticates with the password from
	// PasswordFile or PasswordEnv.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// StartTLS (email) is on unless set false, which only a relay on a
	// loopback address may be: nothing else is spoken to in the clear.
	StartTLS *bool `yaml:"starttls"`
	// CAFile (email, optional) holds PEM certificates to verify the
	// server with instead of the system's roots (a private relay).
	CAFile string `yaml:"ca_file"`
}

// sinkKeys are the keys each sink type takes beyond name and type; a key
// of another type's is refused, so that a misplaced secret or address is
// said, not ignored.
var sinkKeys = map[string][]string{
	"webhook":   {"url", "secret_file", "secret_env"},
	"slack":     {"channel", "token_file", "token_env", "signing_secret_file", "signing_secret_env", "deciders", "decider_groups", "listen", "api_url"},
	"pagerduty": {"routing_key_file", "routing_key_env", "url", "source"},
	"teams":     {"url_file", "url_env"},
	"email":     {"address", "from", "to", "username", "password_file", "password_env", "starttls", "ca_file"},
}

// setKeys are the keys s sets, beyond name and type.
func (s *NotifySink) setKeys() []string {
	var out []string
	for _, f := range []struct {
		k   string
		set bool
	}{
		{"url", s.URL != ""}, {"secret_file", s.SecretFile != ""}, {"secret_env", s.SecretEnv != ""},
		{"channel", s.Channel != ""}, {"token_file", s.TokenFile != ""}, {"token_env", s.TokenEnv != ""},
		{"signing_secret_file", s.SigningSecretFile != ""}, {"signing_secret_env", s.SigningSecretEnv != ""},
		{"deciders", len(s.Deciders) > 0}, {"decider_groups", len(s.DeciderGroups) > 0}, {"listen", s.Listen != ""}, {"api_url", s.APIURL != ""},
		{"routing_key_file", s.RoutingKeyFile != ""}, {"routing_key_env", s.RoutingKeyEnv != ""}, {"source", s.Source != ""},
		{"url_file", s.URLFile != ""}, {"url_env", s.URLEnv != ""},
		{"address", s.Address != ""}, {"from", s.From != ""}, {"to", len(s.To) > 0}, {"username", s.Username != ""},
		{"password_file", s.PasswordFile != ""}, {"password_env", s.PasswordEnv != ""}, {"starttls", s.StartTLS != nil}, {"ca_file", s.CAFile != ""},
	} {
		if f.set {
			out = append(out, f.k)
		}
	}
	return out
}

// StartTLSOn reports whether an email sink upgrades with STARTTLS.
func (s *NotifySink) StartTLSOn() bool { return s.StartTLS == nil || *s.StartTLS }

// NotifyRoute sends the events it matches to its sinks (see notify.Route).
type NotifyRoute struct {
	Sinks       []string `yaml:"sinks"`
	Events      []string `yaml:"events"`
	Namespaces  []string `yaml:"namespaces"`
	EffectTypes []string `yaml:"effect_types"`
}

// Routes converts the routes for notify.Router.
func (n *Notify) RouteList() []notify.Route {
	out := make([]notify.Route, 0, len(n.Routes))
	for _, r := range n.Routes {
		out = append(out, notify.Route{Sinks: r.Sinks, Events: r.Events, Namespaces: r.Namespaces, EffectTypes: r.EffectTypes})
	}
	return out
}

func (n *Notify) fill() {
	if n.MaxAttempts == 0 {
		n.MaxAttempts = notify.DefaultMaxAttempts
	}
	n.MaxBackoff.orDefault(notify.DefaultMaxBackoff)
	if n.MaxWaiting == 0 {
		n.MaxWaiting = notify.DefaultMaxWaiting
	}
	if n.MaxDeadLetters == 0 {
		n.MaxDeadLetters = notify.DefaultMaxDead
	}
}

var (
	sinkNameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	slackUserRe  = regexp.MustCompile(`^[UW][A-Z0-9]{2,20}$`)
	slackGroupRe = regexp.MustCompile(`^S[A-Z0-9]{2,20}$`)
	envNameRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (n *Notify) problems() []Problem {
	var probs []Problem
	add := func(p, format string, args ...any) {
		probs = append(probs, Problem{Path: p, Message: fmt.Sprintf(format, args...)})
	}
	if n.MaxAttempts < 1 {
		add("notify.max_attempts", "must be at least 1")
	}
	if n.MaxBackoff.Value() <= 0 {
		add("notify.max_backoff", "%q is not a positive duration (e.g. 10m)", n.MaxBackoff.String())
	}
	if n.MaxWaiting < 1 {
		add("notify.max_waiting", "must be at least 1 (entries waiting per sink; default 10000)")
	}
	if n.MaxDeadLetters < 1 {
		add("notify.max_dead_letters", "must be at least 1 (dead letters kept per sink; default 1000)")
	}
	for i, f := range n.BudgetThresholds {
		if !(f > 0 && f <= 1) {
			add(fmt.Sprintf("notify.budget_thresholds[%d]", i), "%v must be a fraction of the limit above 0 and at most 1 (e.g. 0.8)", f)
		}
	}
	names := map[string]string{}
	var needConsole []string // the sinks whose links need notify.console_url
	oneSecret := func(p, what, file, env string) { secretSource(add, p, what, file, env) }
	for i, s := range n.Sinks {
		p := fmt.Sprintf("notify.sinks[%d]", i)
		switch {
		case !sinkNameRe.MatchString(s.Name):
			add(p+".name", "%q must be 1-63 lowercase letters, digits, '_' or '-'", s.Name)
		case names[s.Name] != "":
			add(p+".name", "%q is already the name of %s", s.Name, names[s.Name])
		default:
			names[s.Name] = p
		}
		if keys, ok := sinkKeys[s.Type]; ok && s.Type != "webhook" && s.Type != "slack" {
			for _, k := range s.setKeys() {
				if !slices.Contains(keys, k) && (k != "url" || s.Type != "teams") { // teams: said below
					add(p+"."+k, "is not a key of %s sinks (they take %s)", s.Type, strings.Join(keys, ", "))
				}
			}
		}
		switch s.Type {
		case "pagerduty":
			oneSecret(p, "routing_key", s.RoutingKeyFile, s.RoutingKeyEnv)
			if s.URL != "" {
				if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					add(p+".url", "%q is not an http(s) URL (the Events API v2 endpoint; leave it out for PagerDuty's own)", s.URL)
				} else if u.Scheme == "http" && !loopback.Is(u.Host) {
					// Every request carries the routing key: as an email
					// sink's starttls, the clear only on this machine.
					add(p+".url", "%q is plain http: the routing key in every request would cross the network in the clear; use https (http only for a loopback address)", s.URL)
				}
			}
		case "teams":
			oneSecret(p, "url", s.URLFile, s.URLEnv)
			if s.URL != "" {
				add(p+".url", "the Workflows webhook's URL carries its signature, a secret: put it in the file url_file names or the variable url_env names")
			}
			needConsole = append(needConsole, p)
		case "email":
			if host, port, err := net.SplitHostPort(s.Address); err != nil || host == "" || port == "" {
				add(p+".address", "%q is not the SMTP server's host:port (e.g. smtp.example.com:587)", s.Address)
			} else if !s.StartTLSOn() && !loopback.Is(s.Address) {
				add(p+".starttls", "may be false only for a relay on a loopback address (127.0.0.1, ::1, localhost), not %s: mail and credentials are never sent over the network in the clear", host)
			}
			if !mailAddress(s.From) {
				add(p+".from", "%q is not an email address (e.g. ratchet@example.com)", s.From)
			}
			if len(s.To) == 0 {
				add(p+".to", "is required: the recipients' addresses")
			}
			for j, to := range s.To {
				if !mailAddress(to) {
					add(fmt.Sprintf("%s.to[%d]", p, j), "%q is not an email address", to)
				}
			}
			if s.Username != "" {
				oneSecret(p, "password", s.PasswordFile, s.PasswordEnv)
			} else if s.PasswordFile != "" || s.PasswordEnv != "" {
				add(p+".username", "is required with password_file or password_env")
			}
			needConsole = append(needConsole, p)
		case "webhook":
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add(p+".url", "%q is not an http(s) URL", s.URL)
			}
			oneSecret(p, "secret", s.SecretFile, s.SecretEnv)
			if s.Channel != "" || s.TokenFile != "" || s.TokenEnv != "" || len(s.Deciders) > 0 || s.Listen != "" {
				add(p, "channel, token_*, deciders and listen are for slack sinks")
			}
		case "slack":
			if s.Channel == "" {
				add(p+".channel", "is required: the id of the channel approvals go to (e.g. C0123ABCD)")
			}
			oneSecret(p, "token", s.TokenFile, s.TokenEnv)
			for j, u := range s.Deciders {
				if !slackUserRe.MatchString(u) {
					add(fmt.Sprintf("%s.deciders[%d]", p, j), "%q is not a Slack user id (U… or W…; the member id in a Slack profile)", u)
				}
			}
			for j, g := range s.DeciderGroups {
				if !slackGroupRe.MatchString(g) {
					add(fmt.Sprintf("%s.decider_groups[%d]", p, j), "%q is not a Slack user group id (S…)", g)
				}
			}
			if len(s.Deciders) > 0 || len(s.DeciderGroups) > 0 {
				oneSecret(p, "signing_secret", s.SigningSecretFile, s.SigningSecretEnv)
				if s.Listen == "" {
					add(p+".listen", "is required with deciders: where Slack's button clicks arrive (path /slack/interactivity)")
				} else if _, port, err := net.SplitHostPort(s.Listen); err != nil || port == "" {
					add(p+".listen", "%q is not a host:port address (e.g. 0.0.0.0:8790)", s.Listen)
				}
			}
			if s.APIURL != "" {
				if u, err := url.Parse(s.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					add(p+".api_url", "%q is not an http(s) URL", s.APIURL)
				}
			}
			if s.URL != "" {
				add(p+".url", "is for webhook sinks")
			}
		default:
			add(p+".type", "%q must be webhook, slack, pagerduty, teams or email", s.Type)
		}
	}
	if n.ConsoleURL != "" {
		if u, err := url.Parse(n.ConsoleURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			add("notify.console_url", "%q is not the console's http(s) address (e.g. https://ratchet.example.com), without query or fragment", n.ConsoleURL)
		}
	} else if len(needConsole) > 0 {
		add("notify.console_url", "is required with %s (a teams or email sink): the console's address as people reach it, where their links open approvals (e.g. https://ratchet.example.com)", needConsole[0])
	}
	for i, r := range n.Routes {
		p := fmt.Sprintf("notify.routes[%d]", i)
		if len(r.Sinks) == 0 {
			add(p+".sinks", "is required")
		}
		for j, s := range r.Sinks {
			if names[s] == "" {
				add(fmt.Sprintf("%s.sinks[%d]", p, j), "%q is not the name of a sink under notify.sinks", s)
			}
		}
		for j, ev := range r.Events {
			if !ledger.NotifyTypes[ev] {
				add(fmt.Sprintf("%s.events[%d]", p, j), "%q is not a notification event (%s)", ev, notifyTypeList())
			}
		}
		for j, g := range r.Namespaces {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				add(fmt.Sprintf("%s.namespaces[%d]", p, j), "%q is not a namespace or glob", g)
			}
		}
		for j, g := range r.EffectTypes {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				add(fmt.Sprintf("%s.effect_types[%d]", p, j), "%q is not a glob over effect types", g)
			}
		}
	}
	if len(n.Sinks) > 0 && len(n.Routes) == 0 {
		add("notify.routes", "is empty, so no event reaches the sinks; add a route (e.g. {sinks: [%s]} for every event)", n.Sinks[0].Name)
	}
	return probs
}

// mailAddress reports whether s is one bare email address (no display
// name, no control characters: it goes into headers and SMTP commands).
func mailAddress(s string) bool {
	a, err := mail.ParseAddress(s)
	return err == nil && a.Name == "" && a.Address == s && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r == 0x7f })
}

func notifyTypeList() string { return strings.Join(sortedKeys(ledger.NotifyTypes), ", ") }

// ReadSecret reads a sink's secret from the file or the environment
// variable the config names, trimmed of surrounding whitespace.
func ReadSecret(file, env string) (string, error) {
	if env != "" {
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return "", fmt.Errorf("environment variable %s is empty", env)
		}
		return v, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading secret: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("secret file %s is empty", file)
	}
	return v, nil
}

// secretSource reports, through add, what is wrong with a secret that must
// come from exactly one of a file (<what>_file) or an environment variable
// (<what>_env): never from the config file itself.
func secretSource(add func(p, format string, args ...any), p, what, file, env string) {
	switch {
	case file == "" && env == "":
		add(p, "needs %s_file or %s_env (secrets never go in the config file)", what, what)
	case file != "" && env != "":
		add(p, "has both %s_file and %s_env; use one", what, what)
	case env != "" && !envNameRe.MatchString(env):
		add(p+"."+what+"_env", "%q is not an environment variable name", env)
	}
}
