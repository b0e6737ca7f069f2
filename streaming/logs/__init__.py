"""Durable outputs beside the metrics: the rebalance event log and the sample of undecodable records."""
