package policy

import (
	"errors"
	"strings"
)

// Rewrite turns the words and, or and not into CEL's &&, || and ! where
// they stand as operators: identifiers outside string literals and
// comments, not selected as a field (args.and stays a field). The result
// has the same length and the same columns as the input, so CEL's error
// positions point into the condition as written. Everything else is left
// alone for CEL to parse.
//
// There is no "not in": write not (x in y).
func Rewrite(when string) (string, error) {
	var b strings.Builder
	b.Grow(len(when))
	last := 0
	err := scan(when, func(tok token) {
		if tok.kind != tokIdent || tok.afterDot {
			return
		}
		var op string
		switch tok.text {
		case "and":
			op = "&& "
		case "or":
			op = "||"
		case "not":
			op = "!  "
		default:
			return
		}
		b.WriteString(when[last:tok.pos])
		b.WriteString(op)
		last = tok.pos + len(tok.text)
	})
	if err != nil {
		return "", err
	}
	b.WriteString(when[last:])
	return b.String(), nil
}

type tokKind int

const (
	tokIdent tokKind = iota
	tokString
	tokOther
)

type token struct {
	kind tokKind
	pos  int
	text string
	// afterDot is set for an identifier that follows a '.' (a field
	// selection), ignoring spaces and comments in between.
	afterDot bool
}

var errUnterminated = errors.New("unterminated string literal")

// scan splits a CEL expression into identifiers, string literals and
// everything else, well enough to find operator words. Numbers are skipped
// whole, so the e of 1e10 is never an identifier.
func scan(src string, emit func(token)) error {
	prevDot := false
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '`':
			// An escaped identifier: `a-b`.
			j := strings.IndexByte(src[i+1:], '`')
			if j < 0 {
				return errors.New("unterminated escaped identifier")
			}
			i += j + 2
			prevDot = false
		case isDigit(c):
			for i < len(src) && (isIdentChar(src[i]) || src[i] == '.' && i+1 < len(src) && isDigit(src[i+1])) {
				i++
			}
			prevDot = false
		case isIdentStart(c):
			j := i
			for j < len(src) && isIdentChar(src[j]) {
				j++
			}
			word := src[i:j]
			if j < len(src) && (src[j] == '"' || src[j] == '\'') && isStringPrefix(word) {
				end, err := stringEnd(src, j, strings.ContainsAny(word, "rR"))
				if err != nil {
					return err
				}
				emit(token{kind: tokString, pos: i, text: src[i:end]})
				i = end
				prevDot = false
				continue
			}
			emit(token{kind: tokIdent, pos: i, text: word, afterDot: prevDot})
			i = j
			prevDot = false
		case c == '"' || c == '\'':
			end, err := stringEnd(src, i, false)
			if err != nil {
				return err
			}
			emit(token{kind: tokString, pos: i, text: src[i:end]})
			i = end
			prevDot = false
		default:
			emit(token{kind: tokOther, pos: i, text: src[i : i+1]})
			prevDot = c == '.'
			i++
		}
	}
	return nil
}

// stringEnd returns the index just past the string literal whose opening
// quote is at src[q].
func stringEnd(src string, q int, raw bool) (int, error) {
	quote := src[q]
	delim := string(quote)
	if strings.HasPrefix(src[q:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	i := q + len(delim)
	for i < len(src) {
		if !raw && src[i] == '\\' {
			i += 2
			continue
		}
		if strings.HasPrefix(src[i:], delim) {
			return i + len(delim), nil
		}
		if len(delim) == 1 && src[i] == '\n' {
			return 0, errUnterminated
		}
		i++
	}
	return 0, errUnterminated
}

func isStringPrefix(w string) bool {
	switch strings.ToLower(w) {
	case "r", "b", "rb", "br":
		return true
	}
	return false
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentChar(c byte) bool  { return isIdentStart(c) || isDigit(c) }
