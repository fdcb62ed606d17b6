"""The notifier's pure core: which events make which notifications, their bodies, how webhooks
are signed, when a failed delivery is tried again."""
