package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// runToken is "ratchet token hash": it reads a token from stdin (never from
// a flag, where ps would show it) and prints the SHA-256 the config wants.
func runToken(_ context.Context, args []string, stdin io.Reader, stdout, _ io.Writer) error {
	if len(args) != 1 || args[0] != "hash" {
		return &exitError{code: 2, err: fmt.Errorf("usage: ratchet token hash < token-file")}
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("reading token: %w", err)
	}
	token := strings.TrimSpace(line)
	if token == "" {
		return fmt.Errorf("no token on stdin")
	}
	sum := sha256.Sum256([]byte(token))
	fmt.Fprintln(stdout, hex.EncodeToString(sum[:]))
	return nil
}
