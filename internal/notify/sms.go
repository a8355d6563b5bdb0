package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// SMSConfig is the sms global option: the shipper's URL, its bearer token
// and the sender number or name.
type SMSConfig struct {
	URL   string
	Token string
	From  string
	// Client defaults to an http.Client with a 30 s timeout.
	Client *http.Client
}

// SMSSender hands text messages to an HTTP shipper: a POST of
// {"to","from","text"} with "Authorization: Bearer <token>". Any answer
// other than 2xx is a failure, retried by the worker.
type SMSSender struct {
	cfg SMSConfig
}

// NewSMSSender checks cfg and returns its sender.
func NewSMSSender(cfg SMSConfig) (*SMSSender, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("notify: sms shipper URL %q is not an http(s) URL", cfg.URL)
	}
	if cfg.Token == "" {
		return nil, errors.New("notify: sms shipper token is empty")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	return &SMSSender{cfg: cfg}, nil
}

type smsRequest struct {
	To   string `json:"to"`
	From string `json:"from"`
	Text string `json:"text"`
}

// Send posts m to the shipper.
func (s *SMSSender) Send(ctx context.Context, m Message) error {
	body, err := json.Marshal(smsRequest{To: m.To, From: s.cfg.From, Text: m.Text})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("sms: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.cfg.Token)
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		// The URL, not the token, may appear in the error.
		return fmt.Errorf("sms: %w", err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("sms: shipper answered %s: %q", resp.Status, redactEcho(bytes.TrimSpace(snippet), m.Text))
	}
	return nil
}

// redactEcho removes from a shipper's answer every word of the message
// that may be a secret (a run of letters, digits, '-' and '_' of 4 or more
// that holds a digit: a one-time password, a link's token), so that an
// answer echoing the message carries none of it into the log and the
// outbox. Words are matched whatever escaping the answer uses, since no
// JSON or URL escaping touches those characters.
func redactEcho(answer []byte, text string) []byte {
	words := strings.FieldsFunc(text, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_')
	})
	for _, w := range words {
		if len(w) >= 4 && strings.ContainsAny(w, "0123456789") {
			answer = bytes.ReplaceAll(answer, []byte(w), []byte("[redacted]"))
		}
	}
	return answer
}
