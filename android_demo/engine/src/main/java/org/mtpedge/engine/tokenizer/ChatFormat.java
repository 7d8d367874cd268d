package org.mtpedge.engine.tokenizer;

import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Renders a conversation the way the bundle's Jinja chat template does, without a Jinja engine: the ChatML
 * family (SmolLM2, Qwen2/2.5/3: {@code <|im_start|>role\ncontent<|im_end|>\n}), including a default system
 * message that the template inserts when the conversation has none. No template: plain concatenation, the
 * Python runtime's fallback. Any other template is refused by name (golden-tested against jinja2 output).
 */
public final class ChatFormat {
    /** One message of a conversation. */
    public static final class Message {
        public final String role;
        public final String content;

        public Message(String role, String content) {
            this.role = role;
            this.content = content;
        }
    }

    /** A default system message is one string literal holding the whole block, e.g. '<|im_start|>system\nYou are
     *  ...<|im_end|>\n' (unlike '<|im_start|>system\n' + messages[0]['content'], which the [^'] stops). */
    private static final Pattern DEFAULT_SYSTEM = Pattern.compile(
            "'<\\|im_start\\|>system(?:\n|\\\\n)([^']*?)<\\|im_end\\|>");

    private final boolean chatMl;
    private final String defaultSystem;

    public ChatFormat(String template) {
        if (template == null) {
            chatMl = false;
            defaultSystem = null;
        } else if (template.contains("<|im_start|>")) {
            chatMl = true;
            Matcher m = DEFAULT_SYSTEM.matcher(template);
            defaultSystem = m.find() ? m.group(1).replace("\\n", "\n") : null;
        } else {
            throw new TokenizerException("this app renders ChatML chat templates only (<|im_start|>...); the bundle's "
                    + "template is another kind: use a ChatML model (SmolLM2, Qwen2, Qwen3) or a base model");
        }
    }

    public String render(List<Message> messages, boolean addGenerationPrompt) {
        StringBuilder out = new StringBuilder();
        if (!chatMl) {
            for (int i = 0; i < messages.size(); i++) {
                out.append(i > 0 ? "\n" : "").append(messages.get(i).content);
            }
            return out.append(addGenerationPrompt ? "\n" : "").toString();
        }
        if (defaultSystem != null && (messages.isEmpty() || !messages.get(0).role.equals("system"))) {
            out.append("<|im_start|>system\n").append(defaultSystem).append("<|im_end|>\n");
        }
        for (Message m : messages) {
            out.append("<|im_start|>").append(m.role).append('\n').append(m.content).append("<|im_end|>\n");
        }
        if (addGenerationPrompt) {
            out.append("<|im_start|>assistant\n");
        }
        return out.toString();
    }
}
