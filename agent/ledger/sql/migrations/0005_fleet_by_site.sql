-- The fleet is keyed by (site, gateway) (operator.md section 3, issue 36): two sites' `gw-1` are
-- two gateways, no longer one row.
--
-- arrival_site(via, kind, source): the site of an arrival, from its CloudEvents `source` as the
-- gateway's encoder makes it (agent/sinks/encode.py): a transition, gap or anomaly is
-- `<site>/pct(device)/pct(channel)` (the last two segments stripped), a boot_observed
-- `<site>/pct(device)` and an identity_incomplete `<site>/pct(gateway)` (the last one stripped).
-- Device and channel are percent-encoded (no `/` inside); the site may hold `/`, it keeps them.
-- An import line's source is `<device>/<channel>` with no site, a rejected arrival has none: ''
-- (the site is not known). A transition source without a channel (`<site>/<device>`: the contract
-- allows it, the gateway's pollers never make one) gives its site's parent, or '' (not known).
CREATE FUNCTION arrival_site(via text, kind text, source text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN via = 'import' THEN ''
        WHEN kind IN ('transition', 'gap', 'anomaly')
            THEN coalesce(substring(source FROM '^(.+)/[^/]+/[^/]+$'), '')
        WHEN kind IN ('boot_observed', 'identity_incomplete')
            THEN coalesce(substring(source FROM '^(.+)/[^/]+$'), '')
        ELSE ''
    END;

-- The fleet's skip scan: one probe per (gateway, site) pair, then its last arrival. It takes the
-- place of 0003's (gateway, received_at), whose other readers (the pages' gateway filter) it serves
-- by its first column: one index per arrival written, as before.
CREATE INDEX arrival_gateway_site_received ON arrival (gateway, arrival_site(via, kind, source), received_at);
DROP INDEX arrival_gateway_received;

-- gateway_status: one row per (site, gateway). A row kept before this migration gets the `site`
-- of the record it holds (every gateway's record names its site); failing that, the site of its
-- gateway's latest arrival whose site is known; failing that, '' (not known).
ALTER TABLE gateway_status ADD COLUMN site text;
UPDATE gateway_status s SET site = coalesce(
    nullif(s.status->>'site', ''),
    (SELECT arrival_site(a.via, a.kind, a.source) FROM arrival a
      WHERE a.gateway = s.gateway AND arrival_site(a.via, a.kind, a.source) <> ''
      ORDER BY a.received_at DESC LIMIT 1),
    '');
ALTER TABLE gateway_status ALTER COLUMN site SET NOT NULL;
ALTER TABLE gateway_status DROP CONSTRAINT gateway_status_pkey;
ALTER TABLE gateway_status ADD CONSTRAINT gateway_status_pkey PRIMARY KEY (site, gateway);
