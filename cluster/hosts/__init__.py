"""Hosts on one machine for tests and trials: Linux network namespaces with addresses of their
own on a bridge (plan.py: names, addresses, commands; net.py: makes and removes them, runs
processes in them, cuts links), and Kray deployed onto them with `ray start` and `kray start
--address` as on machines of one's own (deploy.py: KrayHosts). Needs root and `ip netns`.
"""
