"""Security building blocks for the gateway (issue 18), pure and sans-IO.

SASL exchanges (`scram`, `plain`), listener configs (`listeners`), principals (`principal`) and
the ACL authorizer (`authorizer`). No sockets, no Ray, no clock: the gateway's connection loop
feeds them bytes and configs and acts on what they return.
"""
