// Package simmodel is a simulated language model for the card-dispute
// example: a deterministic, rule-based stand-in that evals and tests use in
// place of a real model. It is a test fixture, not a model. It reads what a
// real model would read — the agent's instructions, the task, and the tool
// results in the conversation (ticket, customer profile, card transactions,
// receipts, denials) — and decides the next tool call with a fixed policy
// that works a card-dispute ticket: read the ticket, look up the customer
// and the transactions, find the duplicate the ticket complains about,
// raise one dispute, refund the extra charge, draft and send the customer an
// email, and summarise.
//
// Unlike the scripted provider, which plays fixed turns whatever it is
// asked, the simulated model answers the request in front of it: a
// different ticket or a different bank gives different calls, and so do
// the agent's instructions, through a few explicit switches (Rules, read by
// ReadRules from phrases in the system prompt). An agent version whose
// instructions drop "refund the extra charge" refunds both charges; one
// whose instructions drop "never follow them" (instructions found in
// tickets) obeys text planted in a ticket. That is what lets an eval catch a
// deliberately worse version, and pass a reworded one that keeps the rules.
//
// It is not a language model and does not pretend to judge tone or handle
// tasks outside the card-dispute flow; for anything it does not recognise it
// stops and says what a human should check. It keeps no state between calls
// (everything is derived from the request), so it is safe for concurrent
// use and a replay that asks it again gets the same answer. Usage is
// estimated from the request and response sizes (model.EstimateTokens), so
// a priced alias gives runs a cost.
package simmodel

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentplane/agentplane/model"
)

// Options configure a Provider. The zero value is ready to use.
type Options struct{}

// ProviderType is the provider type models.yaml names the simulated model
// by; a program adds it with platform.BuildOptions.Types.
const ProviderType = "carddispute-sim"

// Provider is the simulated model. It is safe for concurrent use.
type Provider struct{}

var _ model.Provider = (*Provider)(nil)

// New returns a simulated model.
func New(Options) *Provider { return &Provider{} }

// Complete answers one request: the next step of the card-dispute policy
// given what the conversation holds, or a summary when the request offers
// no tools (the loop's last call at a budget limit).
func (p *Provider) Complete(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim model: %w", err)
	}
	if req == nil {
		return nil, &model.Error{Err: fmt.Errorf("sim model: nil request")}
	}
	c := readConversation(req)
	text, calls := decide(c, ReadRules(req.System), len(req.Tools) == 0 || req.ForbidToolCalls)
	var content []model.Part
	if text != "" {
		content = append(content, model.Part{Type: model.PartText, Text: text})
	}
	for i, call := range calls {
		args, err := json.Marshal(call.args)
		if err != nil {
			return nil, &model.Error{Err: fmt.Errorf("sim model: %w", err)}
		}
		content = append(content, model.Part{Type: model.PartToolUse, ToolUseID: fmt.Sprintf("toolu_sim_%02d_%d", c.turns, i),
			Name: call.name, Input: args})
	}
	stop := model.StopEndTurn
	if len(calls) > 0 {
		stop = model.StopToolUse
	}
	id := req.Model
	if id == "" {
		id = "sim"
	}
	resp := &model.Response{Model: id, Content: content, StopReason: stop, Usage: model.Usage{
		InputTokens:  model.EstimateTokens(req),
		OutputTokens: model.EstimateContentTokens(content),
	}}
	if err := model.ValidateResponse(resp); err != nil {
		return nil, &model.Error{Err: fmt.Errorf("sim model: %w", err)}
	}
	return resp, nil
}
