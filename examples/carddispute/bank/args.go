package bank

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on arguments. The broker validates arguments against the tool's
// manifest schema first; the bank checks again because it must not trust
// its caller.
const (
	maxArgsBytes    = 64 << 10
	maxReasonLen    = 1000
	maxSubjectLen   = 200
	maxBodyLen      = 20000
	maxEmailLen     = 254
	maxDisputeTxns  = 20
	defaultTxnLimit = 100
	maxTxnLimit     = 50000
	maxKeyLen       = 512
)

var (
	ticketIDPattern = regexp.MustCompile(`^T-[0-9]{1,10}$`)
	txnIDPattern    = regexp.MustCompile(`^txn_[A-Za-z0-9_]{1,64}$`)
)

// decodeArgs decodes a JSON object of arguments into v strictly: unknown
// fields, trailing data and non-objects are errors.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(raw) > maxArgsBytes {
		return fmt.Errorf("arguments are larger than %d bytes", maxArgsBytes)
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("arguments must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the arguments object")
	}
	return nil
}

func checkCustomerID(id string) error {
	if id == "" {
		return errors.New("customer_id is required")
	}
	if !customerIDPattern.MatchString(id) {
		return fmt.Errorf("customer_id %q is not a customer id (c_ followed by digits)", id)
	}
	return nil
}

func checkTxnID(field, id string) error {
	if id == "" {
		return fmt.Errorf("%s is required", field)
	}
	if !txnIDPattern.MatchString(id) {
		return fmt.Errorf("%s %q is not a transaction id", field, id)
	}
	return nil
}

// checkText accepts printable text (newlines and tabs allowed when
// multiline) of 1..max characters.
func checkText(field, s string, max int, multiline bool) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("%s is required", field)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	if n := utf8.RuneCountInString(s); n > max {
		return fmt.Errorf("%s is %d characters long; at most %d allowed", field, n, max)
	}
	for _, r := range s {
		switch {
		case r == '\n' || r == '\r':
			if !multiline {
				return fmt.Errorf("%s must be a single line", field)
			}
		case r == '\t':
		case unicode.IsControl(r):
			return fmt.Errorf("%s contains a control character", field)
		}
	}
	return nil
}

// checkAddress accepts one bare email address ("name@domain"), without a
// display name.
func checkAddress(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s is required", field)
	}
	if len(s) > maxEmailLen {
		return fmt.Errorf("%s is longer than %d characters", field, maxEmailLen)
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return fmt.Errorf("%s %q is not a single bare email address", field, s)
	}
	return nil
}

func checkDate(field, s string) error {
	if s == "" {
		return nil
	}
	if _, err := time.Parse(time.DateOnly, s); err != nil {
		return fmt.Errorf("%s %q is not a date (YYYY-MM-DD)", field, s)
	}
	return nil
}

// requestHash fingerprints normalised arguments, so that a key reused for a
// different request is detected.
func requestHash(tool string, normalised any) (string, error) {
	b, err := json.Marshal(normalised)
	if err != nil {
		return "", err
	}
	return digest(tool, string(b)), nil
}
