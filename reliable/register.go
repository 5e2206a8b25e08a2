package reliable

import (
	"context"
	"errors"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

type registration struct {
	self    frame.MemberID
	members []frame.MemberInfo
}

func register(ctx context.Context, l link.Link, s *settings) (*registration, error) {
	return nil, errors.New("reliable: registration not implemented yet")
}

func (r *registration) attach(e *engine) {}
