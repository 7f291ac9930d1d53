package model

// bytesPerToken is the rough ratio of bytes to tokens the estimates assume.
const bytesPerToken = 4

// EstimateTokens estimates the input tokens of req without a tokenizer:
// ceil(bytes/4) over the system prompt, every message part's text (which
// includes tool results), tool-call names and inputs, and every tool
// definition's name, description and input schema.
//
// It is an estimate, not a count: real tokenizers differ by model and
// language, and providers add framing tokens. It is deterministic, so a
// replayed run computes the same number, which is what pre-call budget checks
// and the scripted provider need; recorded usage from the provider remains the
// figure that costs are computed from.
func EstimateTokens(req *Request) int64 {
	if req == nil {
		return 0
	}
	n := int64(len(req.System))
	for _, m := range req.Messages {
		n += contentBytes(m.Content)
	}
	for _, t := range req.Tools {
		n += int64(len(t.Name) + len(t.Description) + len(t.InputSchema))
	}
	return ceilTokens(n)
}

// EstimateContentTokens estimates the tokens of message content, such as a
// response's output, by the same rule as EstimateTokens: ceil(bytes/4) of
// every part's text, tool name and tool input.
func EstimateContentTokens(content []Part) int64 {
	return ceilTokens(contentBytes(content))
}

func contentBytes(content []Part) int64 {
	var n int64
	for _, p := range content {
		n += int64(len(p.Text) + len(p.Name) + len(p.Input))
	}
	return n
}

func ceilTokens(bytes int64) int64 {
	return (bytes + bytesPerToken - 1) / bytesPerToken
}
