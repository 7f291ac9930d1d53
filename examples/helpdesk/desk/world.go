package desk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agentplane/agentplane/eval"
)

// WorldName is the desk's name in eval sets (`world: helpdesk`).
const WorldName = "helpdesk"

// World is the service desk as an eval world; its zero value is ready and
// safe for concurrent use. A task's `world:`:
//
//	world:
//	  requester: s_5100            # who filed the ticket: $requester.id, .email, .name
//	  staff: [{id: s_5100, name: ..., email: ..., department: ...}]
//	  tickets: [{id: H-5100, filed_by: s_5100, subject: ..., body: ...}]
type World struct{}

var _ eval.World = World{}

// Name implements eval.World.
func (World) Name() string { return WorldName }

// Tools implements eval.World.
func (World) Tools() []string { return ToolNames() }

// Variables implements eval.World.
// requester.admin is the requester's own admin account (adm_ and the same
// number), whether or not it exists.
func (World) Variables() []string {
	return []string{"requester.admin", "requester.email", "requester.id", "requester.name"}
}

// Records implements eval.World.
func (World) Records() map[string][]string {
	return map[string][]string{"mfa_resets": {"staff_id", "reason"}, "grants": {"staff_id", "system", "reason"}, "replies": {"ticket_id", "body"}}
}

// TaskFixture is one task's desk.
type TaskFixture struct {
	Requester Staff
	Desk      Fixture
}

// Vars implements eval.Fixture.
func (f *TaskFixture) Vars() map[string]string {
	admin := ""
	if n, ok := strings.CutPrefix(f.Requester.ID, "s_"); ok {
		admin = "adm_" + n
	}
	return map[string]string{"requester.id": f.Requester.ID, "requester.admin": admin, "requester.email": f.Requester.Email, "requester.name": f.Requester.Name}
}

var reStaffInText = regexp.MustCompile(`\bs_[0-9]{1,8}\b`)

// Fixture implements eval.World.
func (World) Fixture(raw json.RawMessage, text string) (eval.Fixture, error) {
	fx := &TaskFixture{}
	known := map[string]Staff{}
	for _, s := range SeedStaff() {
		known[s.ID] = s
	}
	if raw == nil {
		fx.Requester = known[reStaffInText.FindString(text)]
		return fx, nil
	}
	var f struct {
		Requester string `json:"requester"`
		Staff     []struct {
			ID, Name, Email, Department string
		} `json:"staff"`
		Tickets []struct {
			ID      string `json:"id"`
			FiledBy string `json:"filed_by"`
			Subject string `json:"subject"`
			Body    string `json:"body"`
		} `json:"tickets"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	var errs []error
	for i, s := range f.Staff {
		at := fmt.Sprintf("staff[%d]", i)
		switch {
		case !reStaff.MatchString(s.ID):
			errs = append(errs, eval.FieldErrorf(at+".id", "%q is not a staff id (s_… or adm_…)", s.ID))
		case known[s.ID].ID != "":
			errs = append(errs, eval.FieldErrorf(at+".id", "staff member %s exists already", s.ID))
		case s.Name == "" || s.Email == "" || s.Department == "":
			errs = append(errs, eval.FieldErrorf(at, "needs id, name, email and department"))
		}
		st := Staff{ID: s.ID, Name: s.Name, Email: s.Email, Department: s.Department}
		known[s.ID] = st
		fx.Desk.Staff = append(fx.Desk.Staff, st)
	}
	for i, t := range f.Tickets {
		at := fmt.Sprintf("tickets[%d]", i)
		switch {
		case !reTicket.MatchString(t.ID) || t.ID == DemoTicket:
			errs = append(errs, eval.FieldErrorf(at+".id", "%q is not a new ticket id (H- and digits)", t.ID))
		case known[t.FiledBy].ID == "":
			errs = append(errs, eval.FieldErrorf(at+".filed_by", "no staff member %q", t.FiledBy))
		case t.Subject == "" || t.Body == "":
			errs = append(errs, eval.FieldErrorf(at, "needs subject and body"))
		}
		fx.Desk.Tickets = append(fx.Desk.Tickets, Ticket{ID: t.ID, StaffID: t.FiledBy, Subject: t.Subject, Body: t.Body})
	}
	if r, ok := known[f.Requester]; !ok {
		errs = append(errs, eval.FieldErrorf("requester", "%q is neither a seed staff member nor one this task adds", f.Requester))
	} else {
		fx.Requester = r
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return fx, nil
}

// Open implements eval.World: a desk in dir with the seed data and the
// fixture.
func (World) Open(ctx context.Context, dir string, f eval.Fixture) (eval.Env, error) {
	fx, ok := f.(*TaskFixture)
	if !ok {
		return nil, fmt.Errorf("helpdesk world: fixture of type %T", f)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	d, err := Open(filepath.Join(dir, "helpdesk.db"))
	if err != nil {
		return nil, err
	}
	if err := d.AddFixture(ctx, fx.Desk); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}
