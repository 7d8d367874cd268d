package org.mtpedge.engine;

/** Drafters (ported from the Python runtime) against golden cases; filled in with the drafter port. */
public class DrafterGoldenTest {
}
