package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Limits and topic permissions in a definitions file, as RabbitMQ 3.10
// writes them: a user's limits in its object's "limits"; a vhost's as
// the runtime parameter {"component": "vhost-limits", "name": "limits",
// "value": {...}} (its import reads them there; its export also shows
// them in the vhost's "limits", [] when none); "topic_permissions" a
// list of {"user", "vhost", "exchange", "write", "read"}.

// limitPairs is limits as rabbitmqctl export_definitions writes a
// vhost's: [[name, value], ...] sorted by name, [] for none.
func limitPairs(l map[string]int64) []any {
	out := []any{}
	for _, name := range slices.Sorted(maps.Keys(l)) {
		out = append(out, []any{name, l[name]})
	}
	return out
}

// vhostLimitsComponent is the runtime parameter component of RabbitMQ's
// vhost limits; its one parameter is named "limits".
const vhostLimitsComponent = "vhost-limits"

type importTopicPerm struct {
	User     string `json:"user"`
	VHost    string `json:"vhost"`
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
}

// vhostLimits is a vhost-limits parameter's limits.
func (p *importParameter) vhostLimits() (map[string]int64, error) {
	if p.Name != "limits" {
		return nil, fmt.Errorf("a vhost's limits are its parameter named 'limits'")
	}
	l, err := rawLimits(p.Value)
	if err != nil {
		return nil, err
	}
	if l == nil {
		l = map[string]int64{}
	}
	return l, nil
}

// hasVHostLimits reports whether the file has vhost's vhost-limits
// parameter.
func (im *imported) hasVHostLimits(vhost string) bool {
	return slices.ContainsFunc(im.parameters, func(p importParameter) bool {
		return p.Component == vhostLimitsComponent && p.VHost == vhost
	})
}

// rawLimits decodes a limits field: an object of integers, or the list
// of [name, integer] pairs rabbitmqctl export_definitions writes in a
// vhost's "limits" (its proplist); absent, null, {} and [] (its export of
// none) are none.
func rawLimits(raw json.RawMessage) (map[string]int64, error) {
	if emptyJSON(raw) {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := decodeJSON(raw, &m); err != nil {
		var pairs [][]json.RawMessage
		if decodeJSON(raw, &pairs) != nil {
			return nil, errors.New("limits must be an object or a list of [name, value] pairs")
		}
		m = map[string]json.RawMessage{}
		for _, p := range pairs {
			var name string
			if len(p) != 2 || decodeJSON(p[0], &name) != nil {
				return nil, errors.New("limits must be an object or a list of [name, value] pairs")
			}
			m[name] = p[1]
		}
	}
	out := make(map[string]int64, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		v, err := limitInt(name, m[name])
		if err != nil {
			return nil, errors.New(errReason(err))
		}
		out[name] = v
	}
	return out, nil
}
