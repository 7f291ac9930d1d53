package main

import "unsafe"

func uintptrOf[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }

// landlockRuleNetPort is LANDLOCK_RULE_NET_PORT (Linux 6.7), not yet in x/sys.
const landlockRuleNetPort = 2
