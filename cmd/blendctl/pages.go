package main

import "context"

// allPages collects every item of an AIP-158 list, one call per page under
// the CLI's deadline: page returns the items of a page token and the next
// token (empty on the last page).
func allPages[T any](ctx context.Context, page func(ctx context.Context, token string) ([]T, string, error)) ([]T, error) {
	var all []T
	token := ""
	for {
		pctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		items, next, err := page(pctx, token)
		cancel()
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}
