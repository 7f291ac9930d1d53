-- The TTL each lease was granted or renewed for, in microseconds. A lease
-- whose expiry lies farther ahead than its TTL was written by a clock that
-- has since stepped back, and is bounded to now + TTL when a worker next
-- claims. Leases held while this migration runs get the TTL they were
-- granted with, as far as the row can tell.
ALTER TABLE runs ADD COLUMN lease_ttl INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET lease_ttl = max(lease_expires - updated_at, 0) WHERE status = 'running'
