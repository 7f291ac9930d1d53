package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Formats. Every "format" a manifest's input schema declares is asserted
// (JSON Schema 2020-12 only annotates by default, so a schema saying
// format: email would otherwise accept "a@b.in\r\nBcc: x@evil.example"). A
// format the broker cannot check is refused when the manifest is loaded.
// "email" is stricter than RFC 5321, because the value goes to a mail
// system as a recipient: one plain ASCII mailbox, no quoting, no
// %-routing, bang paths or address literals (see validateEmail).

// assertedFormats are the formats the schema library checks, plus email,
// which this package replaces.
var assertedFormats = []string{
	"date", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "iri", "iri-reference", "json-pointer",
	"period", "regex", "relative-json-pointer", "semver", "time", "uri", "uri-reference", "uri-template", "uuid",
}

// schemaKeywords lists, for the keywords whose values hold schemas, how:
// one schema, an array of schemas, or a map of name to schema.
var (
	oneSchema   = []string{"additionalItems", "additionalProperties", "contains", "contentSchema", "else", "if", "items", "not", "propertyNames", "then", "unevaluatedItems", "unevaluatedProperties"}
	schemaList  = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	schemaByKey = []string{"$defs", "definitions", "dependentSchemas", "patternProperties", "properties", "dependencies"}
)

// checkFormats walks a schema and refuses a format that would not be
// asserted.
func checkFormats(raw json.RawMessage) error {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	var errs []error
	var walk func(v any, at string, depth int)
	walk = func(v any, at string, depth int) {
		obj, ok := v.(map[string]any)
		if !ok || depth > 64 {
			return
		}
		if f, ok := obj["format"].(string); ok && !slices.Contains(assertedFormats, f) {
			errs = append(errs, fmt.Errorf("%s: format %q cannot be enforced by the broker (supported: %s)", at, f, strings.Join(assertedFormats, ", ")))
		}
		for _, k := range oneSchema {
			if s, ok := obj[k]; ok {
				walk(s, at+"/"+k, depth+1)
			}
		}
		for _, k := range schemaList {
			if l, ok := obj[k].([]any); ok {
				for i, s := range l {
					walk(s, fmt.Sprintf("%s/%s/%d", at, k, i), depth+1)
				}
			}
		}
		for _, k := range schemaByKey {
			if m, ok := obj[k].(map[string]any); ok {
				names := make([]string, 0, len(m))
				for n := range m {
					names = append(names, n)
				}
				slices.Sort(names)
				for _, n := range names {
					walk(m[n], at+"/"+k+"/"+n, depth+1)
				}
			}
		}
	}
	walk(doc, "#", 0)
	return errors.Join(errs...)
}

// emailFormat replaces the library's email check.
var emailFormat = &jsonschema.Format{Name: "email", Validate: validateEmail}

// validateEmail accepts one mailbox a mail system cannot read as anything
// else: at most 254 bytes of printable ASCII with no space; a local part of
// at most 64 characters, dot-separated atoms of letters, digits and
// !#$&'*+/=?^_`{|}~- (no "%", whose routing forwards mail to another host;
// no "!" bang paths; no quoted local part, which can carry any character);
// one "@"; a domain name of at least two labels of letters, digits and
// hyphens (no address literal such as [10.0.0.1], which bypasses DNS and
// any domain rule). Non-string values are left to "type".
func validateEmail(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	if len(s) > 254 {
		return errors.New("longer than 254 characters")
	}
	for _, r := range s {
		switch {
		case r == '\r' || r == '\n':
			return errors.New("contains a line break, which would start another mail header; give exactly one address")
		case r < 0x20 || r == 0x7f:
			return errors.New("contains a control character")
		case r == ' ' || r == '\t':
			return errors.New("contains a space; give exactly one address, without a display name")
		case r > 0x7e:
			return fmt.Errorf("contains the non-ASCII character %U; only plain ASCII addresses are accepted", r)
		}
	}
	at := strings.IndexByte(s, '@')
	if at < 0 {
		return errors.New("missing @")
	}
	local, domain := s[:at], s[at+1:]
	if strings.IndexByte(domain, '@') >= 0 {
		return errors.New("more than one @; give exactly one address")
	}
	switch {
	case local == "":
		return errors.New("nothing before the @")
	case len(local) > 64:
		return errors.New("the part before the @ is longer than 64 characters")
	case strings.HasPrefix(local, `"`):
		return errors.New("quoted local parts are not accepted")
	case strings.HasPrefix(local, ".") || strings.HasSuffix(local, ".") || strings.Contains(local, ".."):
		return errors.New("the part before the @ has a dot at an end or two dots in a row")
	}
	for _, r := range local {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune(".#$&'*+/=?^_`{|}~-", r):
		case r == '%':
			return errors.New(`contains "%", which routes mail through the domain to another host; give the final address`)
		case r == '!':
			return errors.New(`contains "!", a routing path; give the final address`)
		default:
			return fmt.Errorf("the character %q is not allowed before the @", r)
		}
	}
	if strings.HasPrefix(domain, "[") {
		return errors.New("address literals such as [10.0.0.1] are not accepted; give a domain name")
	}
	labels := strings.Split(domain, ".")
	if len(domain) > 253 || len(labels) < 2 {
		return errors.New("the domain must be a full domain name such as example.com")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") {
			return fmt.Errorf("the domain %q has an empty, over-long or hyphen-edged label", domain)
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("the character %q is not allowed in a domain name", r)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return errors.New("the domain ends in a number; give a domain name")
	}
	return nil
}
