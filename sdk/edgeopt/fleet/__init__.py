"""The fleet side: a collector that stores what devices publish, and the views over it.

    from edgeopt.fleet.store import open_store
"""
