"""The gossip service's side of the cluster: links to other nodes, joins, the view."""
