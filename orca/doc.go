// Package orca is shared data-objects replicated on every member of a
// group and kept alike by the group's total order: the object layer of
// Tanenbaum, Kaashoek and Bal's broadcast system and the Orca language's
// model ("Object Management", "Orca"), on rbcast's reliable.Total.
//
// See docs/orca.md.
package orca
