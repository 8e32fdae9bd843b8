"""Security building blocks (issue 18), pure and sans-IO, in a room of their own.

SASL exchanges (`scram`, `plain`), listener configs (`listeners`), TLS contexts (`tls`), a
listener's security settings (`settings`), principals (`principal`), the ACL authorizer
(`authorizer`, `access`, `api_acls`) and Kray's inter-broker login (`inter_broker`). No Ray, no
clock: the gateway's connection loop feeds them bytes and configs and acts on what they return; the
controller, followers, coordinators and share-partition leaders use the inter-broker login and the
SCRAM credentials. (They lived in actors/gateway/security/ before.)
"""
