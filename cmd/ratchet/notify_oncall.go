package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/internal/loopback"
	"github.com/ratchet-mcp/ratchet/notify"
)

// onCallSink builds a pagerduty, teams or email sink of the config,
// reading its secret; ok is false for another type.
func onCallSink(s config.NotifySink, consoleURL string) (sink notify.Sink, ok bool, err error) {
	switch s.Type {
	case "pagerduty":
		key, err := config.ReadSecret(s.RoutingKeyFile, s.RoutingKeyEnv)
		if err != nil {
			return nil, true, err
		}
		return &notify.PagerDuty{RoutingKey: key, URL: s.URL, Source: s.Source, ConsoleURL: consoleURL}, true, nil
	case "teams":
		u, err := config.ReadSecret(s.URLFile, s.URLEnv)
		if err != nil {
			return nil, true, err
		}
		// Checked here, where it is read, and never quoted: its sig
		// parameter lets anyone post to the channel.
		if pu, perr := url.Parse(u); perr != nil || pu.Host == "" || (pu.Scheme != "https" && (pu.Scheme != "http" || !loopback.Is(pu.Host))) {
			return nil, true, errors.New("the Workflows webhook URL read from url_file or url_env is not an https URL (http only for a loopback address): its signature must never cross the network in the clear")
		}
		return &notify.Teams{URL: u, ConsoleURL: consoleURL}, true, nil
	case "email":
		m := &notify.Email{Addr: s.Address, From: s.From, To: s.To, Username: s.Username, NoTLS: !s.StartTLSOn(), ConsoleURL: consoleURL}
		if s.Username != "" {
			if m.Password, err = config.ReadSecret(s.PasswordFile, s.PasswordEnv); err != nil {
				return nil, true, err
			}
		}
		if s.CAFile != "" {
			pem, err := os.ReadFile(s.CAFile)
			if err != nil {
				return nil, true, fmt.Errorf("reading ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, true, fmt.Errorf("ca_file %s holds no PEM certificate", s.CAFile)
			}
			m.TLSConfig = &tls.Config{RootCAs: pool}
		}
		return m, true, nil
	}
	return nil, false, nil
}
