package org.mtpedge.demo;

import java.io.File;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;

import android.app.Activity;
import android.content.Intent;
import android.net.Uri;
import android.os.Bundle;
import android.os.Handler;
import android.os.Looper;
import android.widget.ArrayAdapter;
import android.widget.Button;
import android.widget.CheckBox;
import android.widget.EditText;
import android.widget.ScrollView;
import android.widget.Spinner;
import android.widget.TextView;

import org.mtpedge.engine.GenerationStats;
import org.mtpedge.engine.drafters.Drafters;

/**
 * The chat screen: pick a bundle (pushed with adb or imported), a drafter and CPU or NPU, load, then chat. The
 * reply streams into the transcript; the stats line shows tokens/s and tokens per call (tau) live, and the full
 * stats of the run when it ends. All engine work runs on one background thread.
 */
public class MainActivity extends Activity {
    private static final int PICK_FOLDER = 1;
    private static final int MAX_NEW_TOKENS = 256;

    private final ExecutorService worker = Executors.newSingleThreadExecutor();
    private final Handler ui = new Handler(Looper.getMainLooper());
    private final AtomicBoolean cancel = new AtomicBoolean(false);
    private BundleStore store;
    private ChatSession session;
    private boolean generating;

    private Spinner bundleSpinner;
    private Spinner drafterSpinner;
    private CheckBox useQnn;
    private Button loadButton;
    private Button sendButton;
    private TextView status;
    private TextView transcript;
    private TextView stats;
    private EditText prompt;
    private ScrollView scroll;
    private final List<File> bundles = new ArrayList<>();

    @Override
    protected void onCreate(Bundle savedInstanceState) {
        super.onCreate(savedInstanceState);
        setContentView(R.layout.activity_main);
        bundleSpinner = findViewById(R.id.bundle);
        drafterSpinner = findViewById(R.id.drafter);
        useQnn = findViewById(R.id.use_qnn);
        loadButton = findViewById(R.id.load);
        sendButton = findViewById(R.id.send);
        status = findViewById(R.id.status);
        transcript = findViewById(R.id.transcript);
        stats = findViewById(R.id.stats);
        prompt = findViewById(R.id.prompt);
        scroll = findViewById(R.id.scroll);
        Button importButton = findViewById(R.id.import_bundle);

        store = new BundleStore(this);
        drafterSpinner.setAdapter(new ArrayAdapter<>(this, android.R.layout.simple_spinner_dropdown_item,
                Drafters.NAMES));
        drafterSpinner.setSelection(2); // hybrid; a loaded bundle selects its own default (Drafters.defaultFor)
        refreshBundles();

        importButton.setOnClickListener(v -> startActivityForResult(new Intent(Intent.ACTION_OPEN_DOCUMENT_TREE),
                PICK_FOLDER));
        loadButton.setOnClickListener(v -> load());
        sendButton.setOnClickListener(v -> {
            if (generating) {
                cancel.set(true);
            } else {
                send();
            }
        });
        sendButton.setEnabled(false);
    }

    private void refreshBundles() {
        bundles.clear();
        bundles.addAll(store.list());
        List<String> names = new ArrayList<>();
        for (File f : bundles) {
            names.add(f.getName());
        }
        bundleSpinner.setAdapter(new ArrayAdapter<>(this, android.R.layout.simple_spinner_dropdown_item, names));
        loadButton.setEnabled(!bundles.isEmpty());
        if (bundles.isEmpty()) {
            status.setText(getString(R.string.no_bundles, store.root().getAbsolutePath()));
        }
    }

    private void load() {
        if (bundles.isEmpty()) {
            return;
        }
        File folder = bundles.get(bundleSpinner.getSelectedItemPosition());
        boolean qnn = useQnn.isChecked();
        loadButton.setEnabled(false);
        sendButton.setEnabled(false);
        status.setText("Loading " + folder.getName() + (qnn ? " on the NPU…" : " on the CPU…"));
        ChatSession previous = session;
        session = null;
        worker.execute(() -> {
            if (previous != null) {
                previous.close();
            }
            long started = System.nanoTime();
            try {
                int threads = Math.max(1, Math.min(4, Runtime.getRuntime().availableProcessors() / 2));
                ChatSession loaded = ChatSession.open(folder, qnn, threads);
                double seconds = (System.nanoTime() - started) / 1e9;
                ui.post(() -> {
                    session = loaded;
                    // lossless by default: plain decoding where this bundle's drafted rows would differ from it
                    // (a QDQ / QNN bundle with several decode graphs), else lookup
                    drafterSpinner.setSelection(Arrays.asList(Drafters.NAMES).indexOf(loaded.defaultDrafter()));
                    status.setText(String.format(Locale.ROOT, "%s · loaded in %.1f s", loaded.description, seconds));
                    transcript.setText("");
                    sendButton.setEnabled(true);
                    loadButton.setEnabled(true);
                });
            } catch (RuntimeException err) {
                ui.post(() -> {
                    status.setText("Cannot load " + folder.getName() + ": " + err.getMessage());
                    loadButton.setEnabled(true);
                });
            }
        });
    }

    private void send() {
        String text = prompt.getText().toString().trim();
        ChatSession current = session;
        if (text.isEmpty() || current == null) {
            return;
        }
        prompt.setText("");
        transcript.append((transcript.length() > 0 ? "\n\n" : "") + "You: " + text + "\n\nAssistant: ");
        String drafter = Drafters.NAMES[drafterSpinner.getSelectedItemPosition()];
        generating = true;
        cancel.set(false);
        sendButton.setText(R.string.stop);
        worker.execute(() -> {
            try {
                GenerationStats result = current.reply(text, drafter, MAX_NEW_TOKENS, new ChatSession.Listener() {
                    @Override
                    public void onText(String delta) {
                        ui.post(() -> {
                            transcript.append(delta);
                            scroll.post(() -> scroll.fullScroll(ScrollView.FOCUS_DOWN));
                        });
                    }

                    @Override
                    public void onProgress(int tokens, double tokensPerCall, double tokensPerSecond) {
                        String line = String.format(Locale.ROOT, "%d tokens · %.1f tok/s · %.2f tokens/call",
                                tokens, tokensPerSecond, tokensPerCall);
                        ui.post(() -> stats.setText(line));
                    }
                }, cancel::get);
                ui.post(() -> stats.setText(result.summary() + " · " + result.finishReason));
            } catch (RuntimeException err) {
                ui.post(() -> transcript.append("\n[error: " + err.getMessage() + "]"));
            } finally {
                ui.post(() -> {
                    generating = false;
                    sendButton.setText(R.string.send);
                });
            }
        });
    }

    @Override
    protected void onActivityResult(int requestCode, int resultCode, Intent data) {
        super.onActivityResult(requestCode, resultCode, data);
        if (requestCode != PICK_FOLDER || resultCode != RESULT_OK || data == null || data.getData() == null) {
            return;
        }
        Uri tree = data.getData();
        status.setText("Importing…");
        worker.execute(() -> {
            try {
                File imported = store.importTree(getContentResolver(), tree, (file, copied, total) -> {
                    if (copied % (64L << 20) < (1 << 20)) { // about every 64 MB
                        String line = String.format(Locale.ROOT, "Importing %s: %d of %d MB", file, copied >> 20,
                                total >> 20);
                        ui.post(() -> status.setText(line));
                    }
                });
                ui.post(() -> {
                    refreshBundles();
                    status.setText("Imported " + imported.getName());
                });
            } catch (Exception err) {
                ui.post(() -> status.setText("Import failed: " + err.getMessage()));
            }
        });
    }

    @Override
    protected void onDestroy() {
        cancel.set(true);
        ChatSession current = session;
        session = null;
        worker.execute(() -> {
            if (current != null) {
                current.close();
            }
        });
        worker.shutdown();
        super.onDestroy();
    }
}
