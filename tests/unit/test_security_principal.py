"""Principals and Kafka's ssl.principal.mapping.rules (actors/security/principal.py), checked
with the examples of Kafka's documentation and the behaviour its SslPrincipalMapper tests describe."""
import pytest

from actors.security.principal import (
    ANONYMOUS, WILDCARD_USER, KafkaPrincipal, NoMatchingRule, SslPrincipalMapper, parse_mapping_rules,
    principal_for, subject_dn)


def test_principals_print_and_parse_as_kafka():
    alice = KafkaPrincipal.user("alice")
    assert str(alice) == "User:alice" and KafkaPrincipal.parse("User:alice") == alice
    assert KafkaPrincipal.parse("User:CN=a:b,O=c") == KafkaPrincipal("User", "CN=a:b,O=c"), "split at the first ':'"
    assert KafkaPrincipal.parse("Group:ops").principal_type == "Group"
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert KafkaPrincipal.parse("User:*") == WILDCARD_USER and WILDCARD_USER.is_wildcard
    assert not KafkaPrincipal.parse("Group:*").is_wildcard
    for bad in ("", "alice", None):
        with pytest.raises(ValueError, match="format principalType:principalName"):
            KafkaPrincipal.parse(bad)


def test_the_documented_example():
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n"
                                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\n"
                                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\n"
                                "DEFAULT")
    assert mapper.name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "serviceuser"
    assert mapper.name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "adminuser@admin"


def test_first_matching_rule_wins_with_case_changes_and_default_last():
    mapper = SslPrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT"]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_an_escaped_comma_inside_a_name():
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_default_rules_keep_the_dn_and_no_rules_map_nothing():
    assert SslPrincipalMapper().name("CN=a,O=b") == "CN=a,O=b"
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=a,O=b"):
        SslPrincipalMapper("").name("CN=a,O=b")
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=(.*),OU=Eng$/$1/").name("CN=a,OU=Ops")


def test_the_pattern_must_match_the_whole_dn():
    mapper = SslPrincipalMapper("RULE:CN=([a-z]+)/$1/")
    with pytest.raises(NoMatchingRule):
        mapper.name("CN=alice,O=x")
    assert mapper.name("CN=alice") == "alice"


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules):
    assert parse_mapping_rules(rules)


@pytest.mark.parametrize("rules, message", [
    ("default", "Invalid rule: 'default'"),
    ("DEFAUL", "Invalid rule"),
    ("DEFAULT/L", "unmatched substring: '/L'"),
    ("DEFAULT/U", "unmatched substring"),
    ("RULE:CN=(.*?),OU=ServiceUsers.*/$1", "closing '/'"),
    ("rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "Invalid rule"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U", "unmatched substring: '/U'"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "closing '/'"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/U", "closing '/'"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/LU", "closing '/'"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/LU", "unmatched substring: 'U'"),
    ("RULE:^CN=(unclosed/$1/", "not a regular expression"),
])
def test_invalid_rules(rules, message):
    with pytest.raises(ValueError, match=message):
        parse_mapping_rules(rules)


def shape(rules):
    return [("DEFAULT",) if r.pattern is None else (r.pattern.pattern, r.replacement, r.case)
            for r in parse_mapping_rules(rules)]


def test_splitting_ignores_empty_entries_and_spaces_around_rules():
    assert shape("") == [] and shape(",   , , ,      , , ,   ") == []
    assert shape("  RULE:// ,  DEFAULT  ") == [("", (), ""), ("DEFAULT",)]
    assert shape(",,RULE://,,,DEFAULT,,") == [("", (), ""), ("DEFAULT",)]
    assert shape("  RULE:   /     / ,  DEFAULT  ") == [("   ", ("     ",), ""), ("DEFAULT",)]
    assert shape("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ") == [
        ("([A-Z]*)", (1,), "U"), ("([a-z]+)", (1,), ""), ("DEFAULT",)]


def test_patterns_and_replacements_may_hold_commas_and_escaped_slashes():
    assert shape(r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT") == [
        (",RULE:,", (",RULE:,/",), "U"), (",", ("RULE:,",), ""), (",RULE:,", ("L,RULE:,",), "L"),
        (", DEFAULT, ", ("DEFAULT",), ""), ("DEFAULT",)]
    mapper = SslPrincipalMapper(r"RULE:^CN=([a-z]+)\/x$/$1\/\$1/")
    assert mapper.name("CN=abc/x") == "abc/$1"


def test_back_references_past_the_last_group_stay_literal():
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$1@$4/").name("CN=a,OU=b") == "a@$4"
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$12/").name("CN=a,OU=b") == "a2", "Java takes $1 then '2'"
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$0!/").name("CN=a") == "CN=a!", "$0 is the whole match"
    assert SslPrincipalMapper("RULE:^CN=(.*)$/cost $/").name("CN=a") == "cost $"


def test_subject_dn_from_pythons_peer_certificate():
    subject = ((("countryName", "US"),), (("stateOrProvinceName", "CA"),), (("organizationName", "Acme, Inc."),),
               (("organizationalUnitName", "Eng"),), (("commonName", "alice"),))
    assert subject_dn(subject) == r"CN=alice,OU=Eng,O=Acme\, Inc.,ST=CA,C=US"
    assert subject_dn(((("domainComponent", "com"),), (("domainComponent", "example"),),
                       (("commonName", " #x+y "), ("userId", "7")))) == r"CN=\ #x\+y\ +UID=7,DC=example,DC=com"


def test_principal_of_a_connection():
    subject = ((("organizationName", "Acme"),), (("commonName", "Alice"),))
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),O=Acme$/$1/L,DEFAULT")
    assert principal_for("PLAINTEXT") == ANONYMOUS
    assert principal_for("SSL") == ANONYMOUS, "no client certificate"
    assert principal_for("SSL", peer_subject=subject, mapper=mapper) == KafkaPrincipal.user("alice")
    assert principal_for("SSL", peer_subject=subject) == KafkaPrincipal.user("CN=Alice,O=Acme")
    assert principal_for("SASL_SSL", sasl_name="bob", peer_subject=subject) == KafkaPrincipal.user("bob")
    assert principal_for("SASL_PLAINTEXT", sasl_name="bob") == KafkaPrincipal.user("bob")
    with pytest.raises(ValueError, match="once SASL authentication completed"):
        principal_for("SASL_PLAINTEXT")
    with pytest.raises(NoMatchingRule):
        principal_for("SSL", peer_subject=subject, mapper=SslPrincipalMapper("RULE:^CN=x$/x/"))


def test_no_certificate_becomes_krays_own_broker():
    """User:kray-broker is a super user reserved to Kray's SCRAM login with its secret: a client
    certificate whose subject the rules map to that name fails its SSL authentication."""
    subject = ((("organizationName", "Acme"),), (("commonName", "kray-broker"),))
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),O=Acme$/$1/,DEFAULT")
    with pytest.raises(NoMatchingRule, match="Kray's own broker login"):
        principal_for("SSL", peer_subject=subject, mapper=mapper)
    assert principal_for("SSL", peer_subject=subject) == KafkaPrincipal.user("CN=kray-broker,O=Acme")
