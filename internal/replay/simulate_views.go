package replay

import (
	"fmt"
	"net"
	"strings"

	"github.com/rbcast/rbcast/reliable/core"
)

// viewInstalled prints a ViewInstalled event with its members.
type viewInstalled struct{ core.Event }

func (e viewInstalled) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "view %d installed, this process member %d:", e.View.ID, e.Member)
	for _, m := range e.View.Members {
		fmt.Fprintf(&b, " %d=%v@%d", m.ID, net.HardwareAddr(m.MAC[:]), m.Incarnation)
	}
	return b.String()
}
