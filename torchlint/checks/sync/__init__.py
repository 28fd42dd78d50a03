"""TL1xx: host/device synchronization and transfers."""
