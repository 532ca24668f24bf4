"""Model serving: endpoints, their replicas and the routes the proxies serve. Pure."""
