"""The second block of the MariaDB key-conversion script: run the stored steps.

It runs the steps the plan block stored in ``ulid_key_conversions_offline``
in order, each statement with ``EXECUTE IMMEDIATE`` (a step's statements
before each batch are separated by NUL, which no name can hold; each may
set ``@sqlalchemy_ulid_bad`` to stop the script): a batched step until a
batch changes no row (committing after each), a step with a guard only while
its columns are there, and it records each step done (the lock, catch-up and
checks excepted: they run on every run). A statement that waits longer than
the lock timeout is tried again, five times in all, then the script stops
(run it again). At the end it unlocks the tables and forgets the plan.
"""

from __future__ import annotations

from .._plan.render_mariadb import compound, lit, signal
from ._offline_mariadb_sql import STEPS_TABLE, Names

__all__ = ["run_block"]

#: Tries of a statement that waits too long for a lock (or is chosen as a deadlock victim).
_TRIES = 5


def run_block(n: Names) -> str:
    """The compound statement that runs the plan's steps."""
    steps, name = n.steps_table, n.name_sql
    op = lit(n.op_name + ": ")
    body = f"""\
  DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;
  DECLARE v_n, v_seq, v_next, v_tries, v_failed, v_filled, v_total, v_cut BIGINT DEFAULT 0;
  DECLARE v_always, v_batched TINYINT;
  DECLARE v_label TEXT CHARACTER SET utf8mb4;
  DECLARE v_guard, v_setup, v_each, v_body, v_rest LONGTEXT CHARACTER SET utf8mb4;
  SELECT COUNT(*) INTO v_n FROM information_schema.TABLES WHERE {n.where(lit(STEPS_TABLE))};
  IF v_n > 0 THEN
    SELECT COUNT(*) INTO v_n FROM {steps} WHERE name = {name} AND seq = 0;
    IF v_n > 0 THEN
      steps: LOOP
        SELECT MIN(seq) INTO v_next FROM {steps} WHERE name = {name} AND seq > v_seq AND done = 0;
        IF v_next IS NULL THEN
          LEAVE steps;
        END IF;
        SET v_seq = v_next;
        SELECT label, always, batched, guard, setup, each_batch, body
          INTO v_label, v_always, v_batched, v_guard, v_setup, v_each, v_body
          FROM {steps} WHERE name = {name} AND seq = v_seq;
        SET @sqlalchemy_ulid_todo = 1;
        IF v_guard IS NOT NULL THEN
          EXECUTE IMMEDIATE v_guard;
        END IF;
        IF @sqlalchemy_ulid_todo THEN
          SELECT CONCAT({op}, v_label) AS progress;
          IF v_setup IS NOT NULL THEN
            EXECUTE IMMEDIATE v_setup;
          END IF;
          SET v_total = 0;
          batches: LOOP
            SET v_rest = v_each;
            each_statement: WHILE v_rest IS NOT NULL DO
              SET @sqlalchemy_ulid_bad = NULL, v_cut = LOCATE(CHAR(0 USING utf8mb4), v_rest);
              EXECUTE IMMEDIATE IF(v_cut = 0, v_rest, LEFT(v_rest, v_cut - 1));
              IF @sqlalchemy_ulid_bad IS NOT NULL THEN
                {signal(f"CONCAT({op}, @sqlalchemy_ulid_bad)")}
              END IF;
              SET v_rest = IF(v_cut = 0, NULL, SUBSTRING(v_rest, v_cut + 1));
            END WHILE each_statement;
            SET v_filled = 0, v_tries = 0;
            retry: LOOP
              IF v_body IS NULL THEN
                LEAVE retry;
              END IF;
              SET v_failed = 0;
              BEGIN
                DECLARE EXIT HANDLER FOR 1205, 1213 SET v_failed = 1;
                EXECUTE IMMEDIATE v_body;
                SET v_filled = ROW_COUNT();
              END;
              IF v_failed = 0 THEN
                LEAVE retry;
              END IF;
              SET v_tries = v_tries + 1;
              IF v_tries >= {_TRIES} THEN
                {signal(f"CONCAT({op}, 'a lock wait timed out {_TRIES} times at: ', v_label, '. Run the script again')")}
              END IF;
              DO SLEEP(0.5 * v_tries);
            END LOOP retry;
            COMMIT;
            IF v_batched = 0 OR v_filled <= 0 THEN
              LEAVE batches;
            END IF;
            SET v_total = v_total + v_filled;
            SELECT CONCAT({op}, v_total, ' rows filled') AS progress;
          END LOOP batches;
        END IF;
        IF v_always = 0 THEN
          UPDATE {steps} SET done = 1 WHERE name = {name} AND seq = v_seq;
        END IF;
      END LOOP steps;
      EXECUTE IMMEDIATE 'UNLOCK TABLES';
      DELETE FROM {steps} WHERE name = {name};
      SELECT {lit(n.op_name + ": " + n.table + " done")} AS progress;
    END IF;
    SELECT COUNT(*) INTO v_n FROM {steps};
    IF v_n = 0 THEN
      DROP TABLE IF EXISTS {steps};
    END IF;
  END IF;
"""  # noqa: E501  (SQL lines, kept whole for the reader of the script)
    return (
        f"-- 2. Run the steps stored in {STEPS_TABLE}, in order, recording each one; the\n"
        "-- swap holds LOCK TABLES ... WRITE on every table. Run again after an\n"
        "-- interruption, it goes on from the first step not done.\n" + compound(body)
    )
