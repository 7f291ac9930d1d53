package bankmcp

import (
	"sync"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
)

// outputSchemas are the JSON Schemas of the tools' results (the bank's
// Profile, TransactionList, DisputeReceipt, RefundReceipt, Draft and
// SentEmail). The host checks every structured result against them.
var outputSchemas = map[string]map[string]any{
	bank.ToolGetCustomerProfile: object(map[string]any{
		"customer_id": str, "name": str, "email": str, "card_last4": str, "segment": str,
	}, "customer_id", "name", "email", "card_last4", "segment"),
	bank.ToolGetCardTransactions: object(map[string]any{
		"customer_id": str,
		"transactions": map[string]any{"type": "array", "items": object(map[string]any{
			"id": str, "date": str, "merchant": str, "amount_inr": num, "currency": str,
		}, "id", "date", "merchant", "amount_inr", "currency")},
		"count":    map[string]any{"type": "integer", "minimum": 0},
		"has_more": map[string]any{"type": "boolean"},
	}, "customer_id", "transactions", "count", "has_more"),
	bank.ToolRaiseDispute: object(map[string]any{
		"dispute_id": str, "status": str, "customer_id": str,
		"transaction_ids": map[string]any{"type": "array", "items": str},
	}, "dispute_id", "status", "customer_id", "transaction_ids"),
	bank.ToolIssueRefund: object(map[string]any{
		"refund_id": str, "transaction_id": str, "amount_inr": num, "status": str,
	}, "refund_id", "transaction_id", "amount_inr", "status"),
	bank.ToolDraftEmail: object(map[string]any{
		"draft_id": str, "to": str, "subject": str, "body": str,
	}, "draft_id", "to", "subject", "body"),
	bank.ToolSendEmail: object(map[string]any{
		"message_id": str, "to": str, "status": str,
	}, "message_id", "to", "status"),
}

var (
	str = map[string]any{"type": "string"}
	num = map[string]any{"type": "number"}
)

func object(props map[string]any, required ...string) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required}
}

// onceBank opens a server's bank at its first call and keeps it; a
// failed open is tried again at the next call.
type onceBank struct {
	mu sync.Mutex
	b  *bank.Bank
}

func (o *onceBank) get(open Opener) (*bank.Bank, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.b != nil {
		return o.b, nil
	}
	b, err := open()
	if err != nil {
		return nil, err
	}
	o.b = b
	return b, nil
}
