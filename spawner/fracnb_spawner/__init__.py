"""fracnb hub-side package: the fractional-GPU spawner, quotas and the culling service."""
