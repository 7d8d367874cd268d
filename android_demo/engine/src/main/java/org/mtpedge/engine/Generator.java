package org.mtpedge.engine;

import java.util.Arrays;
import java.util.function.BooleanSupplier;

/**
 * The decode loop: prefill, then { draft tree -> one graph call -> verify -> commit } until done; port of
 * {@code mtpedge.runtime.generate.generate}. Plain decoding is the same loop with a tree of one node.
 */
public final class Generator {
    /** Receives each step's new tokens as they are accepted (streaming). */
    public interface TokenListener {
        void onTokens(int[] tokens);
    }

    /** What to do when the context fills up. */
    public enum OverflowPolicy { ERROR, STOP }

    /** The new tokens (a stop token that ended the run is not included) and the run's stats. */
    public static final class Result {
        public final int[] tokenIds;
        public final GenerationStats stats;

        Result(int[] tokenIds, GenerationStats stats) {
            this.tokenIds = tokenIds;
            this.stats = stats;
        }
    }

    /** Options of one run; stopTokenIds null = the bundle's end-of-sequence tokens. */
    public static final class Options {
        public int maxNewTokens = 128;
        public SamplingConfig sampling = SamplingConfig.greedy();
        public int[] stopTokenIds;
        public TokenListener listener;
        public Drafter drafter;
        public OverflowPolicy onOverflow = OverflowPolicy.ERROR;
        public BooleanSupplier shouldStop;
    }

    private Generator() {
    }

    public static Result generate(Engine engine, int[] promptIds, Options options) {
        if (options.maxNewTokens < 1) {
            throw new IllegalArgumentException("maxNewTokens must be >= 1, got " + options.maxNewTokens);
        }
        if (promptIds.length >= engine.context) {
            throw new ContextOverflowException("the prompt has " + promptIds.length + " tokens but the bundle's context"
                    + " is " + engine.context + " (room is needed for at least one new token): shorten the prompt or "
                    + "export with a larger --context");
        }
        Run run = new Run(engine, promptIds, options);
        return run.execute();
    }

    /** The mutable state of one generation. */
    private static final class Run {
        private final Engine engine;
        private final int[] promptIds;
        private final Options options;
        private final Sampler sampler;
        private final int[] stops;
        private final GenerationStats stats = new GenerationStats();
        private int[] context;
        private int contextSize;
        private int[] emitted;
        private int emittedSize;

        Run(Engine engine, int[] promptIds, Options options) {
            this.engine = engine;
            this.promptIds = promptIds.clone();
            this.options = options;
            this.sampler = new Sampler(options.sampling);
            this.stops = options.stopTokenIds == null ? engine.stopTokenIds() : options.stopTokenIds.clone();
            this.context = Arrays.copyOf(promptIds, promptIds.length + options.maxNewTokens + 1);
            this.contextSize = promptIds.length;
            this.emitted = new int[options.maxNewTokens];
            stats.promptTokens = promptIds.length;
            stats.drafter = options.drafter == null ? "none" : options.drafter.name();
        }

        Result execute() {
            long started = System.nanoTime();
            double graph0 = engine.graphSeconds();
            int calls0 = engine.graphCalls();
            engine.reset();
            float[] logits = engine.prefill(promptIds);
            stats.prefillCalls = engine.graphCalls() - calls0;
            stats.prefillSeconds = (System.nanoTime() - started) / 1e9;
            Drafter drafter = options.drafter;
            if (drafter != null) {
                drafter.start(engine, promptIds, logits);
            }
            int root = sampler.choose(logits);
            boolean done = emit(new int[] {root});
            int[] carry = new int[0]; // drafts the last call's untrusted rows accepted after the root: this block's lead
            while (!done) {
                if (options.shouldStop != null && options.shouldStop.getAsBoolean()) {
                    stats.finishReason = "cancelled";
                    break;
                }
                if (engine.cache.free() < 1 || !engine.fits(1)) {
                    if (options.onOverflow == OverflowPolicy.STOP) {
                        stats.finishReason = "length";
                        break;
                    }
                    engine.cache.ensureRoom(engine.cache.free() + 1);
                }
                // the last free position: one plain step (a tree's padding rows would find no free cache column)
                boolean drafting = drafter != null && engine.cache.free() > 1;
                Block block = drafting ? Block.propose(drafter, engine, Arrays.copyOf(context, contextSize), root, carry)
                        : Block.plain(root);
                DraftTree tree = block.tree;
                GraphOutput out = engine.runTree(tree, block.slotEmbeddings, drafting && drafter.loraOnSlots());
                stats.decodeCalls++;
                // only rows plain decoding would compute bit for bit are read: the block's leading chain inside the
                // context
                Verifier.Result verified = Verifier.verify(tree, out, sampler, out.plainRows());
                int[] path = Arrays.copyOf(verified.path, Math.min(verified.path.length, engine.cache.free()));
                root = verified.nextToken;
                carry = new int[0];
                int[] seen = path;
                if (path.length < verified.path.length) { // no room for the whole path: the first left out is the root
                    root = tree.token(verified.path[path.length]);
                } else if (drafting) {
                    Verifier.Extension extension = Verifier.untrustedExtension(tree, out, path, root, out.plainRows());
                    carry = extension.tokens;
                    seen = Arrays.copyOf(path, path.length + extension.nodes.length);
                    System.arraycopy(extension.nodes, 0, seen, path.length, extension.nodes.length);
                }
                engine.cache.commitAcceptedKv(out.newKeys, out.newValues, out.width, path);
                if (drafting) {
                    block.observe(drafter, out, seen);
                }
                if (block.carried()) {
                    stats.carriedBlocks++;
                }
                int[] drafts = Verifier.acceptedTokens(tree, path);
                stats.acceptedHistogram.merge(drafts.length, 1, Integer::sum);
                int[] step = Arrays.copyOf(drafts, drafts.length + 1);
                step[drafts.length] = root;
                done = emit(step);
            }
            if (drafter != null && drafter.sizer() != null) {
                stats.sizing = drafter.sizer().stats();
            }
            stats.newTokens = emittedSize;
            stats.elapsedSeconds = (System.nanoTime() - started) / 1e9;
            stats.graphSeconds = engine.graphSeconds() - graph0;
            return new Result(Arrays.copyOf(emitted, emittedSize), stats);
        }

        /** Append tokens up to a stop token or the limit; true when generation is finished. */
        private boolean emit(int[] tokens) {
            int count = 0;
            for (int token : tokens) {
                if (isStop(token)) {
                    stats.finishReason = "stop";
                    break;
                }
                count++;
                if (emittedSize + count >= options.maxNewTokens) {
                    stats.finishReason = "length";
                    break;
                }
            }
            int[] out = Arrays.copyOf(tokens, count);
            System.arraycopy(out, 0, emitted, emittedSize, count);
            emittedSize += count;
            System.arraycopy(out, 0, context, contextSize, count);
            contextSize += count;
            if (count > 0 && options.listener != null) {
                options.listener.onTokens(out);
            }
            return !stats.finishReason.isEmpty();
        }

        private boolean isStop(int token) {
            for (int s : stops) {
                if (s == token) {
                    return true;
                }
            }
            return false;
        }
    }
}
