"""The emulated cluster: hosts as network namespaces joined by shaped links (tc tbf), on one machine."""
