package galera

import "path/filepath"

// OnPortOf is a node that expects its data in another directory but is
// reached on n's client port: what a restarted node sees when another
// server took its port while it was down.
func OnPortOf(n *Node) *Node {
	return &Node{name: n.name, port: n.port, data: filepath.Join(n.dir, "elsewhere")}
}
