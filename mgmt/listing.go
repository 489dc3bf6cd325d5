package mgmt

import (
	"cmp"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Lists answer RabbitMQ's query parameters, so a UI or a script can ask
// for a page of thousands of queues:
//
//	columns=a,b.c    only these fields of each item; a dotted name is a
//	                 field of a field (message_stats.publish_details.rate),
//	                 kept in its object
//	sort=f           by field f, dotted too (numbers numerically), sort_reverse=true
//	name=s           items whose name contains s (case-insensitive), or
//	                 matches s as a regular expression with use_regex=true
//	page=n           with page_size (1..500, default 100): the page, as
//	                 {"items", "page", "page_size", "page_count",
//	                 "item_count", "filtered_count", "total_count"}
const maxPageSize = 500

func shapeList(r *http.Request, items []map[string]any) (any, error) {
	q := r.URL.Query()
	total := len(items)
	if name := q.Get("name"); name != "" {
		match := func(s string) bool { return strings.Contains(strings.ToLower(s), strings.ToLower(name)) }
		if q.Get("use_regex") == "true" {
			re, err := regexp.Compile(name)
			if err != nil {
				return nil, badRequest("invalid regular expression %q: %s", name, err)
			}
			match = re.MatchString
		}
		items = slices.DeleteFunc(slices.Clone(items), func(m map[string]any) bool {
			s, _ := m["name"].(string)
			return !match(s)
		})
	}
	if key := q.Get("sort"); key != "" {
		path := strings.Split(key, ".")
		slices.SortStableFunc(items, func(a, b map[string]any) int { return compareJSON(lookupPath(a, path), lookupPath(b, path)) })
		if q.Get("sort_reverse") == "true" {
			slices.Reverse(items)
		}
	}
	if cols := q.Get("columns"); cols != "" {
		var paths [][]string
		for _, c := range strings.Split(cols, ",") {
			paths = append(paths, strings.Split(c, "."))
		}
		for i, m := range items {
			c := make(map[string]any, len(paths))
			for _, p := range paths {
				copyPath(c, m, p)
			}
			items[i] = c
		}
	}
	if !q.Has("page") {
		return items, nil
	}
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page < 1 {
		return nil, badRequest("page must be a positive integer")
	}
	size := 100
	if q.Has("page_size") {
		if size, err = strconv.Atoi(q.Get("page_size")); err != nil || size < 1 || size > maxPageSize {
			return nil, badRequest("page_size must be between 1 and %d", maxPageSize)
		}
	}
	filtered := len(items)
	pages := max(1, (filtered+size-1)/size)
	if page > pages {
		return nil, badRequest("page_out_of_range: page %d of %d", page, pages)
	}
	items = items[(page-1)*size : min(page*size, filtered)]
	return map[string]any{
		"items": items, "page": page, "page_size": size, "page_count": pages,
		"item_count": len(items), "filtered_count": filtered, "total_count": total,
	}, nil
}

// compareJSON orders JSON values: numbers numerically, then strings,
// then anything else by its text.
func compareJSON(a, b any) int {
	na, aok := number(a)
	nb, bok := number(b)
	switch {
	case aok && bok:
		return cmp.Compare(na, nb)
	case aok:
		return -1
	case bok:
		return 1
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint16:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// lookupPath returns the value at path in m (nil if absent).
func lookupPath(m map[string]any, path []string) any {
	var v any = m
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

// copyPath copies the value at path in src into dst, creating the
// objects on the way, as RabbitMQ's columns keep a nested field.
func copyPath(dst, src map[string]any, path []string) {
	v, ok := src[path[0]]
	if !ok {
		return
	}
	if len(path) == 1 {
		dst[path[0]] = v
		return
	}
	sub, ok := v.(map[string]any)
	if !ok {
		return
	}
	d, _ := dst[path[0]].(map[string]any)
	if d == nil {
		d = map[string]any{}
		dst[path[0]] = d
	}
	copyPath(d, sub, path[1:])
}
